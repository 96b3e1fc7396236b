"""What a crawl's tails leave behind (state/tails.py): nothing. The chunks of a crawl that was
forgotten, cancelled or that finished are deleted from the chunk store, and a host declared
dead has its chunks drained with its head and buffer, so its crawl finishes."""

from __future__ import annotations

from crawler_tasks.web.urls import normalize
from tests.support.sitegen import free_port, running_sites
from tests.support.tails import spilling_crawl
from tests.support.waiting import wait_until


def test_a_forgotten_crawl_leaves_no_chunks(settings, client):  # type: ignore[no-untyped-def]
    crawl = spilling_crawl(["http://a.example/"], settings, client)
    crawl.store.frontier.admit((normalize(f"http://a.example/p{i}"), 1) for i in range(50))
    crawl.store.frontier.tails.tend(0)
    store = crawl.store.frontier.tails.store
    assert store.size()[0] == 5
    crawl.forget(force=True)
    assert store.size() == (0, 0)
    assert not store.objects.root.exists()  # the crawl's directories too


def test_a_dead_hosts_chunks_are_taken_with_its_head(settings, client):  # type: ignore[no-untyped-def]
    """drain.lua alone takes a dead host's head and buffer and leaves its chunks indexed with
    nothing to refill them (the host in neither the ready zset nor the low set: it was not low
    when it died). Tails.drain takes them too, each once."""
    crawl = spilling_crawl(["http://a.example/"], settings, client)
    frontier, pk = crawl.store.frontier, crawl.ck.parts[0]
    urls = [normalize(f"http://a.example/p{i}") for i in range(50)]
    frontier.admit((u, 1) for u in urls)
    frontier.tails.tend(0)
    first = crawl.store.politeness.drain("a.example")
    assert len(first) == 4 + 7 and client.llen(pk.chunks("a.example")) == 5
    assert not client.zscore(pk.ready, "a.example") and not client.sismember(pk.low, "a.example")
    rest = [
        e
        for batch in frontier.tails.drain("a.example", crawl.store.politeness.drain)
        for e in batch
    ]
    taken = sorted(url for _depth, url in first + rest)
    assert taken == sorted([normalize("http://a.example/"), *urls])
    assert not client.exists(pk.chunks("a.example")) and frontier.tails.store.size() == (0, 0)


def test_a_cancelled_crawl_leaves_no_chunks(settings, workers):  # type: ignore[no-untyped-def]
    """cancel.lua counts the spilled URLs and drops their indexes, never the files (no I/O in
    Lua): the crawl's end deletes them."""
    with running_sites(["127.0.0.46"], 5, 2) as (_graph, servers):
        base = servers[0].base_url
        crawl = spilling_crawl(
            [f"{base}/x{i}" for i in range(60)],
            settings,
            None,
            rate=0.5,
            concurrency=1,
            allow_private_networks=True,
        )
        store = crawl.store.frontier.tails.store
        wait_until(lambda: store.size()[0] >= 5, timeout=30)
        crawl.cancel()
        summary = crawl.wait(timeout=60)
    assert summary["status"] == "cancelled"
    assert store.size() == (0, 0)


def test_a_dead_hosts_chunks_are_drained(settings, workers):  # type: ignore[no-untyped-def]
    """A host that refuses every connection is declared dead (max_host_outage 0): its head,
    buffer and chunks all fail at once, unrequested. Its chunks were left in the store before,
    refilled only if the host was marked low when it died (else by nobody: the crawl never
    finished) and then released one by one at the host's pace (here 57 s at 1 request/s)."""
    port = free_port("127.0.0.47")  # nothing listens there
    seeds = [f"http://127.0.0.47:{port}/p{i}" for i in range(60)]
    crawl = spilling_crawl(
        seeds,
        settings,
        None,
        rate=1.0,
        concurrency=1,
        max_host_outage=0,
        allow_private_networks=True,
    )
    summary = crawl.wait(timeout=30)
    counters = summary["counters"]
    assert counters["done"] == counters["admitted"] == 60, counters
    assert counters.get("chunks_written", 0) >= 5, counters  # the host did spill
    assert crawl.store.frontier.tails.store.size() == (0, 0)
