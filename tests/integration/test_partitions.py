"""A crawl split into partitions (state/keys.py) on one standalone Redis: what a Redis Cluster
spreads over its masters. The pipeline in-process (tests/support/driver.py) and the completion check
under concurrent admission; test_cluster.py runs the same with real workers on a cluster."""

from __future__ import annotations

import math
import threading

from crawler_tasks import start_crawl
from crawler_tasks.state import formats
from crawler_tasks.state.formats import LeaseEnd
from crawler_tasks.state.keys import partition_of
from tests.support.sitegen import reachable, running_sites
from tests.unit.test_partitions import HOSTS


def start(settings, servers, **options):  # type: ignore[no-untyped-def]
    seeds = [s.base_url + "/" for s in servers]
    opts = {
        "allow_private_networks": True,
        "allowed_domains": [s.address for s in servers],
        "rate": math.inf,
        "concurrency": 4,
        "partitions": 4,
    }
    return seeds, start_crawl(seeds, settings=settings, **{**opts, **options})


def test_every_partition_has_its_own_counters_and_filter(settings, driver):  # type: ignore[no-untyped-def]
    with running_sites(HOSTS, 20, 6, cross_host_ratio=0.3) as (graph, servers):
        seeds, crawl = start(settings, servers)
        summary = driver.run(crawl)
    assert len(list(crawl.pages())) == len(reachable(graph, seeds)) == summary["counters"]["done"]
    used = {partition_of(h, 4) for h in HOSTS}
    for pk in crawl.store.ck.parts:
        admitted = int(crawl.client.hget(pk.flow, "in") or 0)
        assert (admitted > 0) == (pk.index in used), pk.index
        # A URL's bits go to one of the filter's shards (its hash picks it): a partition
        # with a few URLs may leave shard 0 untouched, so any shard counts.
        shards = range(crawl.store.opts.bloom.shards)
        has_filter = any(crawl.client.exists(pk.bloom(s)) for s in shards)
        assert has_filter == (pk.index in used), pk.index


def test_max_pages_across_partitions(settings, driver):  # type: ignore[no-untyped-def]
    with running_sites(HOSTS[:3], 40, 6, cross_host_ratio=0.3) as (_graph, servers):
        _seeds, crawl = start(settings, servers, max_pages=25)
        summary = driver.run(crawl)
    assert len(list(crawl.pages())) == 25 == summary["counters"]["admitted"]
    assert summary["skipped"].get("max_pages", 0) > 0
    assert crawl.client.hget(crawl.ck.state, "reserved") == b"25"


def test_a_chain_across_partitions_never_looks_drained(settings):  # type: ignore[no-untyped-def]
    """Each URL's child is admitted into another partition before the URL itself finishes, so
    one URL is always outstanding; a checker running all the while must never find the crawl
    drained until the last one finishes. (A check that read the partitions in one pass, or
    "in" before "out", finds it drained sooner or later here.)"""
    hosts = [f"h{i}.example" for i in range(8)]
    crawl = start_crawl(
        [f"http://{hosts[0]}/0"], settings=settings, partitions=4, rate=math.inf, concurrency=1
    )
    store, ledger, status = crawl.store, crawl.store.ledger, crawl.store.lifecycle
    assert len({partition_of(h, 4) for h in hosts}) >= 3
    stop, wrong = threading.Event(), []

    def check() -> None:
        while not stop.is_set():
            if status.drained():
                wrong.append(store.stats.outstanding())

    checker = threading.Thread(target=check)
    checker.start()
    try:
        for i in range(300):
            ((domain, depth, url),) = store.frontier.release_all(10, 180).entries
            child = f"http://{hosts[(i + 1) % len(hosts)]}/{i + 1}"
            assert store.frontier.admit([(child, depth + 1)]).admitted == 1
            entry = formats.Unwritten("rid", "/dev/null", 0.0, {"url": url})
            assert ledger.finish(url, entry, {}) >= 0
            store.politeness.lease(url, domain).release(LeaseEnd.OK)  # its lease back
    finally:
        stop.set()
        checker.join()
    assert wrong == []
    ((_d, _depth, last),) = store.frontier.release_all(10, 180).entries
    ledger.finish(last, formats.Unwritten("rid", "/dev/null", 0.0, {"url": last}), {})
    assert status.drained() and status.finishing()
    assert status.read().status == "finishing"
