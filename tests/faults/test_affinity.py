"""Host affinity when the process holding a host's kept connections dies: SIGKILLed or stopped,
its URLs and the messages in its queue are taken back and the crawl is exact. Affinity itself
with real worker processes: tests/integration/test_affinity.py."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from crawler_tasks.state.formats import Inflight
from crawler_tasks.worker.process.app import direct_queue
from tests.faults.test_faults import cluster, one_host_each, start, wait
from tests.faults.test_overload import assert_no_retry_spent, took_back
from tests.integration.test_affinity import HOSTS, fetchers
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.processes import stop_together
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


@contextmanager
def _mid_crawl(settings, redis_url: str, tmp_path: Path) -> Iterator[tuple]:  # type: ignore[no-untyped-def]
    """Two fetch processes and a parse process crawling HOSTS, 40 pages done: (graph, the
    cluster, seeds, crawl, fetch1's process tag)."""
    with (
        running_sites(HOSTS, 80, 5, cross_host_ratio=0.02, delay=0.03) as (graph, servers),
        cluster(redis_url, tmp_path) as c,
    ):
        c.start("fetch1", "fetch")
        c.start("fetch2", "fetch")
        c.start("parse", "parse")
        wait_until(lambda: len(fetchers(redis_url)) == 2, timeout=30)
        seeds, crawl = start(settings, servers)
        wait_until(lambda: crawl.progress()["done"] > 40, timeout=60)
        fetch1 = next(w for w in fetchers(redis_url) if w.endswith(f"-{c.procs['fetch1'].pid}"))
        yield graph, c, seeds, crawl, fetch1


@pytest.mark.allow_worker_errors(".*")
def test_process_holding_hosts_killed(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """SIGKILL the fetch process holding hosts, not restarted, while its direct queue may hold
    messages: after worker_dead_seconds its URLs go back to the frontier, its queue is
    deleted, the other process takes its hosts; every page once, the counters exact."""
    with _mid_crawl(settings, redis_url, tmp_path) as (graph, c, seeds, crawl, victim):
        client = redis.Redis.from_url(redis_url)
        os.killpg(c.procs["fetch1"].pid, signal.SIGKILL)
        c.procs["fetch1"].wait(10)
        killed_at = time.monotonic()
        summary = wait(crawl, 120)
        took = time.monotonic() - killed_at
        wait_until(lambda: victim not in fetchers(redis_url), timeout=10)
        # Every dispatcher that routed to it deletes its queue on its next look (once a second).
        wait_until(lambda: not client.exists(direct_queue(victim)), timeout=5)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert took < 60, took


@pytest.mark.allow_worker_errors(".*")
def test_process_holding_hosts_stopped(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """SIGTERM (a warm shutdown) the fetch process holding hosts, not restarted, mid-crawl:
    it is sent no new hosts, finishes what it began, hands back what is still in its own
    queue and leaves the holders before it exits (worker/dispatch/departure.py). Nothing is taken back
    and no retry spent, unlike a killed process's URLs; every page once."""
    with _mid_crawl(settings, redis_url, tmp_path) as (graph, c, seeds, crawl, leaving):
        client = redis.Redis.from_url(redis_url)
        stop_together([c.procs["fetch1"]])
        assert leaving not in fetchers(redis_url), "left the holders before it exited"
        assert not client.exists(direct_queue(leaving))
        summary = wait(crawl, 120)
        taken = took_back(tmp_path / "logs")
    log = (tmp_path / "logs" / "fetch1.log").read_text(errors="replace")
    print(*[line for line in log.splitlines() if "left the fetch processes" in line])
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert not taken, taken[:3]
    assert_no_retry_spent(crawl, summary)


@pytest.mark.allow_worker_errors(".*")
def test_process_taken_for_dead_and_woken_holds_hosts_again(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """fetch1 frozen (SIGSTOP) until a dispatcher takes it for dead and removes it from the
    holders (QUICK: 4 s), then woken: it joins the holders again within one round (issue 50:
    ``HostRouter.join`` ran once, and a woken process got no host of its own for the rest of
    its life), and a crawl of the host it holds is released to it."""
    with cluster(redis_url, tmp_path) as c:
        c.start("fetch1", "fetch")
        c.start("fetch2", "fetch")
        wait_until(lambda: len(fetchers(redis_url)) == 2, timeout=60)
        woken = next(w for w in fetchers(redis_url) if w.endswith(f"-{c.procs['fetch1'].pid}"))
        c.signal("fetch1", signal.SIGSTOP)
        try:
            wait_until(lambda: woken not in fetchers(redis_url), timeout=30, interval=0.2)
        finally:
            c.signal("fetch1", signal.SIGCONT)
        woke_at = time.monotonic()
        # One round: its refresh (once a second) after its first beat (every 2 s).
        wait_until(lambda: woken in fetchers(redis_url), timeout=10, interval=0.2)
        back_in = time.monotonic() - woke_at
        hosts = one_host_each(c, settings, ("fetch1", "fetch2"))
        with running_sites(list(hosts), 40, 4) as (_graph, servers):
            _seeds, crawl = start(settings, servers)
            seen = set()
            deadline = time.monotonic() + 60
            while not crawl.progress()["final"] and time.monotonic() < deadline:
                seen |= {Inflight.parse(v.decode()).worker for v in inflight(crawl)}
                time.sleep(0.05)
            summary = wait(crawl, 60)
    print(f"woken process back in the holders {back_in:.1f} s after waking")
    assert woken in seen, f"nothing released to the woken process: {seen}"
    assert summary["status"] == "finished"


def inflight(crawl) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [v for p in crawl.ck.parts for v in crawl.client.hvals(p.inflight)]
