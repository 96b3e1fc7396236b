"""Issue 31: the promises hold under overload, with real worker processes.

1. Politeness at the moment of sending: a broad crawl of more hosts than 2 cores can serve at
   the politeness bound (300 hosts x 6 pages, 2 req/s per host, burst 1, one connection per
   host, 50-350 ms per response: it reaches 0.3-0.55 of the bound), two fetch processes and
   one or two CPU hogs beside them. Judged by the web server in its own process
   (tests/support/broad_web.py: its stamps are not starved by the crawler's GIL): each host's
   arrivals conform to the send gate's GCRA and hold at most rate + 1 requests in a 1-s
   window (both within a stated stamp tolerance), every page once. With host affinity on and
   off, and with a fetch process killed mid-crawl.
2. No false deaths: a fetch process frozen just past the dead threshold, and a pause of Redis
   and every worker together: exact page sets, no ``worker_lost``, no retry spent (the
   crawl's attempts hashes stay empty; take-backs are counted apart). The overload runs above
   (with 2 CPU hogs, death judged at 4 s) check the same.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.state import workers
from crawler_tasks.state.formats import Committed, Unwritten
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.embedded import FETCH_QUEUES
from crawler_tasks.worker.visit.outcome import Final
from crawler_tasks.worker.visit.recorder import write_orphan
from tests.faults.test_faults import (
    cluster,
    holding,
    one_host_each,
    site,
    start,
    wait,
)
from tests.integration.test_lease_exits import crawl_of
from tests.support.broad_web import (
    WIRE_TOLERANCE,
    broad_web,
    cpu_hogs,
    early_sends,
    impolite_hosts,
    max_in_window,
    page_counts,
    per_host_times,
)
from tests.support.driver import Driver
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import SiteServer
from tests.support.waiting import wait_until

MOVED = Committed.MOVED

HOSTS, PAGES, RATE, BURST = 300, 6, 2.0, 1
#: "crawl.low" alone, and the other two fetch queues: no process takes every fetch queue, so
#: none takes a direct queue of its own (routing.own_queue): host affinity is off.
NO_AFFINITY = "crawl.high,crawl.medium"
TOOK_BACK = re.compile(r"took \S+ back")


def took_back(log_dir: Path) -> list[str]:
    return [
        line
        for log in sorted(log_dir.glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if TOOK_BACK.search(line)
    ]


def spent_retries(crawl) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """URL -> failed attempts counted (the crawl's ``attempts`` hashes, every partition)."""
    out: dict[str, int] = {}
    for part in crawl.ck.parts:
        out.update({k.decode(): int(v) for k, v in crawl.client.hgetall(part.attempts).items()})
    return out


def assert_no_retry_spent(crawl, summary) -> None:  # type: ignore[no-untyped-def]
    """No retry counted for any URL (the sites here answer every page at once; their 404s
    are final at the first attempt), and nothing failed ``worker_lost``."""
    assert spent_retries(crawl) == {}
    records = list(crawl.pages(latest=False))
    retried = [r for r in records if "attempts" in r or r.get("error") == "worker_lost"]
    assert not retried, retried[:3]
    assert "worker_lost" not in str(summary.get("failures")), summary.get("failures")
    assert not [k for k in summary["counters"] if "worker_lost" in k or k.startswith("retr")]


def fetchers(redis_url: str) -> set[str]:
    client = redis.Redis.from_url(redis_url)
    try:
        return {m.decode() for m in client.smembers(Keys().fetchers)}
    finally:
        client.close()


def broad_crawl(settings, web):  # type: ignore[no-untyped-def]
    return start_crawl(
        web.seeds(),
        settings=settings,
        allow_private_networks=True,
        allowed_domains=web.domains(),
        rate=RATE,
        burst=BURST,
        concurrency=1,
    )


def pace_line(requests, judge: str) -> str:  # type: ignore[no-untyped-def]
    """The load (the fraction of the politeness bound, hosts x rate, the crawl reached) and
    the pace as ``judge`` stamped it, without tolerance."""
    times = sorted(r[0] for r in requests)
    span = times[-1] - times[0]
    hosts = per_host_times(requests).values()
    crowd = max(max_in_window(ts) for ts in hosts)
    early = max(max(early_sends(ts, 1 / RATE, BURST, 0.0), default=0.0) for ts in hosts)
    return (
        f"{judge}: {len(requests)} requests in {span:.1f} s: "
        f"{len(requests) / span / (HOSTS * RATE):.2f} of the bound; most requests a host got in"
        f" 1 s: {crowd}; earliest: {early:.3f} s"
    )


def assert_paced(web) -> list[tuple[float, int, str, str]]:  # type: ignore[no-untyped-def]
    """Issue 31's pace, judged by kernel arrival stamps (bench/_wire.py: exact however starved
    the server's event loop is) within WIRE_TOLERANCE; the server's stamps are printed beside
    them. Without root / CAP_NET_RAW the kernel judge is skipped, loudly, and the server's
    stamps judge within STAMP_TOLERANCE as before. Returns the server's requests."""
    requests = web.requests()
    print(pace_line(requests, "server stamps"))
    bad_server = impolite_hosts(requests, RATE, BURST)
    print(f"server stamps: {len(bad_server)} hosts paced wrong: {list(bad_server.items())[:2]}")
    if web.wire_off is not None:
        warnings.warn(f"kernel judge skipped: {web.wire_off}", stacklevel=2)
        assert not bad_server, (
            f"{len(bad_server)} hosts paced wrong: {list(bad_server.items())[:3]}"
        )
        return requests
    arrivals, drops = web.arrivals()
    print(pace_line(arrivals, "kernel stamps") + f"; {drops} packets dropped")
    print(f"server stamps behind the kernel's: {web.stamp_lag(requests)}")
    assert drops == 0, f"the capture dropped {drops} packets: no judge"
    assert len(arrivals) >= len(requests), (len(arrivals), len(requests))  # it saw them all
    bad = impolite_hosts(arrivals, RATE, BURST, WIRE_TOLERANCE)
    assert not bad, f"{len(bad)} hosts paced wrong (kernel stamps): {list(bad.items())[:3]}"
    return requests


def assert_polite_and_complete(crawl, summary, web, once_at_server: bool) -> None:  # type: ignore[no-untyped-def]
    requests = assert_paced(web)
    records = Counter(r["url"] for r in crawl.pages(latest=False))
    assert not [u for u, n in records.items() if n > 1], "a page recorded twice"
    assert set(records) == web.expected(), len(set(records) ^ web.expected())
    assert summary["status"] == "finished", summary
    assert summary["counters"]["done"] == len(records)
    pages = page_counts(requests)
    assert len(pages) == HOSTS * PAGES
    assert not [r for r in requests if r[2] == "private"], "a robots-disallowed page fetched"
    if once_at_server:
        twice = [p for p, n in pages.items() if n > 1]
        assert not twice, f"{len(twice)} pages requested twice, e.g. {twice[:3]}"


@pytest.mark.parametrize(
    ("affinity", "hogs"),
    [(True, 1), (False, 1), (True, 2)],
    ids=["affinity-1-hog", "no-affinity-1-hog", "affinity-2-hogs"],
)
def test_overloaded_broad_crawl_is_polite_at_the_server(  # type: ignore[no-untyped-def]
    settings, redis_url, tmp_path, affinity, hogs
):
    """Every page once (records and requests at the server), each host's arrivals paced,
    nothing taken back from a process that was only busy, no retry spent. Worker death is
    judged at 4 s here (test_faults.QUICK), so a false death has every chance to show."""
    with (
        broad_web(tmp_path, HOSTS, PAGES) as web,
        cluster(redis_url, tmp_path) as c,
        cpu_hogs(hogs),
    ):
        queues = FETCH_QUEUES if affinity else NO_AFFINITY
        for name in ("fetch1", "fetch2"):
            c.specs[name] = (queues, "threads", 64, {})
            c._spawn(name)
        if not affinity:
            c.specs["low"] = ("crawl.low", "threads", 8, {})
            c._spawn("low")
        c.start("parse", "parse")
        if affinity:
            wait_until(lambda: len(fetchers(redis_url)) == 2, timeout=30)
            time.sleep(1.5)  # every dispatcher has read who holds hosts (once a second)
        crawl = broad_crawl(settings, web)
        summary = wait(crawl, 120)
        held = fetchers(redis_url)
        logs = tmp_path / "logs"
        lost = took_back(logs)
    assert (len(held) == 2) if affinity else not held, held
    assert_polite_and_complete(crawl, summary, web, once_at_server=True)
    assert not lost, lost[:3]  # nothing taken back from a process that was only busy
    assert_no_retry_spent(crawl, summary)


@pytest.mark.allow_worker_errors(".*")
def test_overloaded_broad_crawl_a_fetch_process_killed(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """SIGKILL one of the two fetch processes (holding half the hosts) mid-crawl, not
    restarted: its URLs are taken back and fetched by the other; politeness still holds at
    the server (a URL the dead process had sent may reach the server again, not early)."""
    with (
        broad_web(tmp_path, HOSTS, PAGES) as web,
        cluster(redis_url, tmp_path) as c,
        cpu_hogs(1),
    ):
        for name in ("fetch1", "fetch2"):
            c.specs[name] = (FETCH_QUEUES, "threads", 64, {})
            c._spawn(name)
        c.start("parse", "parse")
        wait_until(lambda: len(fetchers(redis_url)) == 2, timeout=30)
        time.sleep(1.5)
        crawl = broad_crawl(settings, web)
        wait_until(lambda: crawl.progress()["done"] > HOSTS * PAGES // 3, timeout=90)
        c.kill("fetch1", restart=False)
        summary = wait(crawl, 120)
        taken = took_back(tmp_path / "logs")
    assert_polite_and_complete(crawl, summary, web, once_at_server=False)
    assert taken, "nothing was taken back from the killed process: the test checked nothing"
    assert_no_retry_spent(crawl, summary)  # a take-back is not an attempt


def freeze(c, names: list[str], sig: int) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        c.signal(name, sig)


def stop_holding(c, crawl, name: str) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP the worker process ``name`` at a moment it holds URLs in flight: one that
    holds none (between two of its host's pages) has nothing to take back."""
    for _ in range(100):
        c.signal(name, signal.SIGSTOP)
        if holding(crawl, c.procs[name].pid):
            return
        c.signal(name, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"{name} never held a URL in flight")


def frozen_past_the_dead_threshold(settings, redis_url: str, tmp_path: Path, **env: str) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP a fetch process until its URLs are taken back (worker_dead_seconds, 4 s here),
    then SIGCONT: the page set is exact, nothing fails ``worker_lost``, and the URLs taken
    from it spent no retry (the crawl's attempts hashes stay empty). ``env``: the worker
    processes' (the crawl state elsewhere than the broker:
    tests/faults/test_overload_cluster.py)."""
    with cluster(redis_url, tmp_path, **env) as c:
        c.start_layout()
        hosts = one_host_each(c, settings, ("fetch1", "fetch2"))  # fetch1 holds one of them
        with site(hosts, delay=0.05) as (graph, servers):
            seeds, crawl = start(settings, servers, concurrency=4)
            wait_until(lambda: crawl.progress()["done"] > 40, timeout=60)
            stop_holding(c, crawl, "fetch1")
            frozen_at = time.monotonic()
            try:
                # Just past the threshold: as soon as the first URL was taken back from it.
                wait_until(lambda: took_back(tmp_path / "logs"), timeout=30, interval=0.2)
            finally:
                c.signal("fetch1", signal.SIGCONT)
            frozen = time.monotonic() - frozen_at
            summary = wait(crawl, 120)
        taken = took_back(tmp_path / "logs")
        takebacks = sum(crawl.client.hlen(p.takebacks) for p in crawl.ck.parts)
    print(f"frozen {frozen:.1f} s; {len(taken)} URLs taken back")
    assert taken and takebacks, "nothing was taken back: the test checked nothing"
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert_no_retry_spent(crawl, summary)


@pytest.mark.allow_worker_errors(".*")
def test_fetch_process_frozen_past_the_dead_threshold(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    frozen_past_the_dead_threshold(settings, redis_url, tmp_path)


def test_whole_machine_pause(settings, redis_url, client, tmp_path):  # type: ignore[no-untyped-def]
    """SIGSTOP Redis and every worker process together for 20 s (a paused VM), then SIGCONT
    all: nobody is declared dead, nothing taken back, the page set exact."""
    with site(delay=0.05) as (graph, servers), cluster(redis_url, tmp_path) as c:
        c.start_layout()
        seeds, crawl = start(settings, servers, concurrency=4)
        wait_until(lambda: crawl.progress()["done"] > 40, timeout=60)
        redis_pid = int(client.info("server")["process_id"])
        names = list(c.procs)
        freeze(c, names, signal.SIGSTOP)
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            time.sleep(20)
        finally:
            os.kill(redis_pid, signal.SIGCONT)
            freeze(c, names, signal.SIGCONT)
        summary = wait(crawl, 120)
        taken = took_back(tmp_path / "logs")
    assert not taken, taken[:3]
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert_no_retry_spent(crawl, summary)


def test_a_slow_writer_and_its_own_sweep_keep_one_copy(settings, driver):  # type: ignore[no-untyped-def]
    """Found by the overload test above: a starved writer thread took longer than
    orphan_record_seconds to append its record after finish.lua, so its own process's sweep
    took the record over (claim.lua: the same file) and wrote it; the writer then appended its
    copy and kept it (the fence named its own file). The claim must fence the earlier writer
    even when the claimer writes to the same file."""
    crawl = start_crawl(["http://127.0.0.79/a"], settings=settings, allow_private_networks=True)
    store = driver.ctx.store(crawl.id)
    [(_domain, _depth, url)] = store.frontier.release_all(10, 180).entries
    out = driver.ctx.crawl_runtime(store).output()
    record = {**Final(url, 0, status=200, extra={"fetched_at": time.time()}).record(), "rid": "r"}
    slow = Unwritten("r", str(out.pages_path), time.time() - 60, record)
    assert store.ledger.finish(url, slow, {}) == 0
    [(_url, seen)], _young = store.unwritten.orphans(30)
    assert write_orphan(driver.ctx, store, url, seen)  # the sweep: claimed and written
    assert not out.final(record, commit=lambda: store.unwritten.commit(url, slow) is not MOVED)
    assert [r["url"] for r in crawl.pages(latest=False)] == [url]
    assert store.unwritten.get(url) is None


def test_a_message_taken_just_before_the_look_is_not_taken_back(settings):  # type: ignore[no-untyped-def]
    """Found by the overload test above under 3 parallel crawls: URLs released to the shared
    queues were "taken back (r:...: its worker or message was lost)" from living processes.
    A message a process takes from its queue just before the reclaim looks (every queue
    empty) is in no process's held set until that process's next beat: the look only
    suspects it, and takes it back only if it is still missing after every living process
    beat again. Here the process begins it first: nothing is taken back."""
    driver = Driver(dataclasses.replace(settings, lost_message_seconds=0.1))
    try:
        with SiteServer(address="127.0.0.48") as site:
            site.extra_routes["/p"] = lambda h: h.send_body(200, b"x", "text/plain")
            crawl = crawl_of(settings, site.base_url + "/p")
            assert driver.dispatcher.tick()  # released and published: taken, not yet begun
            time.sleep(1.1)  # released_at has a resolution of a second
            assert driver.dispatcher.reclaim() == 0  # suspected only
            driver.step()  # the process begins (and finishes) it
            driver.ctx.heartbeat.beat()
            assert driver.dispatcher.reclaim() == 0
            summary = driver.run(crawl, timeout=30)
        assert summary["counters"]["done"] == 1 and len(site.requests()) == 1
        assert sum(crawl.client.hlen(p.takebacks) for p in crawl.ck.parts) == 0
    finally:
        driver.close()


def test_a_reclaim_held_up_in_the_middle_judges_nobody_dead(settings, monkeypatch):  # type: ignore[no-untyped-def]
    """Found by the whole-machine pause above (1 run: a URL "taken back (r:...: its worker or
    message was lost)" from a living process): a process paused just after its look began
    (the stall rule already passed) read every heartbeat 20 s late, the other processes'
    not yet written again, and took their URLs. A look held up before its reads judges
    nobody, as one that begins late does. Here the look is held up just before it reads
    the heartbeats, "other" (held up too) beats only after it: nothing is taken back."""
    driver = Driver(dataclasses.replace(settings, worker_dead_seconds=1.0))
    ctx, other = driver.ctx, "other-fetch-process"

    def beat() -> None:
        ctx.client.hset(ctx.keys.workers, other, workers.redis_now(ctx.client))

    def held_up(*args):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(workers, "alive", alive)  # once
        time.sleep(3.5)  # past RECLAIM_EVERY + the dead threshold since the last look
        return alive(*args)

    try:
        crawl = crawl_of(settings, "http://127.0.0.49/p")
        assert driver.dispatcher.tick()
        [(_task, _crawl, url, _depth)] = driver.messages
        store = driver.ctx.store(crawl.id)
        assert store is not None and store.ledger.start(url, other) == 1  # "other" fetches it
        beat()
        assert driver.dispatcher.reclaim() == 0  # the last look before the stall
        alive = workers.alive
        monkeypatch.setattr(workers, "alive", held_up)
        assert driver.dispatcher.reclaim() == 0
        beat()  # resumed
        assert driver.dispatcher.reclaim() == 0
        assert store.ledger.entry(url) is not None
        assert sum(crawl.client.hlen(p.takebacks) for p in crawl.ck.parts) == 0
        # Silent for good while this process runs on: dead, its URL taken back.
        wait_until(lambda: driver.dispatcher.reclaim() == 1, timeout=5, interval=0.2)
        crawl.cancel()
    finally:
        driver.close()
