"""End to end under faults: a worker SIGKILLed mid-crawl, a fetch lost between its release and
its publish; nothing is lost and the page set is exact. Real redis-server, worker processes and
sites on loopback; the crawls without faults: tests/integration/test_crawl.py."""

from __future__ import annotations

import os
import signal

import pytest

from crawler_tasks.state.option_checks import reap_after
from crawler_tasks.surface.embedded import local_workers, stop_process
from tests.integration.test_crawl import expected, start
from tests.support.exact import assert_exact_pages
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

# Redelivery of a dead worker's messages after 4 s instead of 10 minutes (this test only: the
# others run at the defaults).
FAST_REDELIVERY = {"CRAWLER_VISIBILITY_TIMEOUT": "4", "CRAWLER_LEASE_SECONDS": "4"}


@pytest.mark.parametrize("worker_env", [FAST_REDELIVERY])
def test_sigkilled_worker_loses_nothing(settings, redis_url, workers, worker_logs):
    with running_sites(["127.0.0.6"], 150, 5, delay=0.05) as (graph, servers):
        seeds, crawl = start(settings, servers, rate=20.0, concurrency=2)
        wait_until(lambda: crawl.progress()["done"] >= 20, timeout=60)
        fetch_worker = workers[0]
        os.killpg(fetch_worker.pid, signal.SIGKILL)
        fetch_worker.wait(10)
        assert not crawl.finished
        with local_workers(
            redis_url,
            redis_url,
            fetch_threads=4,
            parsers=1,
            extra_env=FAST_REDELIVERY,
            log_dir=str(worker_logs),
        ) as more:
            summary = crawl.wait(timeout=120)
            for proc in more:
                stop_process(proc)
    assert_exact_pages(crawl, expected(graph, seeds), summary)


def test_fetch_lost_between_release_and_publish_is_reaped(settings, redis_url, worker_logs):
    with running_sites(["127.0.0.15"], 20, 3) as (graph, servers):
        # The reaper waits visibility_timeout (the workers') + the crawl's own timeout.
        seeds, crawl = start(settings, servers, timeout=1.0)
        assert reap_after(2, crawl.options) == 3.0
        # A dispatcher that died right after release.lua: URLs in flight, no message anywhere.
        released = crawl.store.frontier.release_all(100, 180)
        assert [url for _, _, url in released.entries] == seeds
        env = {"CRAWLER_VISIBILITY_TIMEOUT": "2"}
        with local_workers(
            redis_url,
            redis_url,
            fetch_threads=4,
            parsers=1,
            extra_env=env,
            log_dir=str(worker_logs),
        ):
            summary = crawl.wait(timeout=60)
    assert_exact_pages(crawl, expected(graph, seeds), summary)
