"""A silent partition: a worker whose every Redis connection (broker and crawl state) goes
through a loopback proxy that stops forwarding without closing anything. Its URLs are taken
back by the other worker within the time a dead worker's are (worker_dead_seconds + a reclaim
round, ~15 s); none of its threads waits for ever (every Redis and broker call has a timeout,
``redis_timeout``); once the link heals it beats again, takes work again, and the crawl ends
exact: one record per URL."""

from __future__ import annotations

import math
import socket
import time
from urllib.parse import urlsplit

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.state import workers
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.embedded import local_workers
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.processes import stop_together
from tests.support.sitegen import running_sites
from tests.support.tcpproxy import Proxy
from tests.support.waiting import wait_until

#: Seconds from the partition to the last of the worker's URLs taken back: the target
#: (~15 s: worker_dead_seconds 10 + a reclaim round), with room for a busy test machine.
TAKEN_BACK_WITHIN = 25.0


def held_by(crawl, worker_ids: set[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """URLs the partitioned worker's processes hold (released to, fetching, parsing)."""
    everything = crawl.store.ledger.stuck(set(), math.inf, set())
    return [url for url, entry, _ in everything if entry.worker in worker_ids]


@pytest.mark.allow_worker_errors(".*")
def test_a_silently_partitioned_worker_is_taken_over_and_rejoins(
    settings, redis_url, tmp_path, worker_logs
):  # type: ignore[no-untyped-def]
    proxy = Proxy(int(urlsplit(redis_url).port or 6379))
    cut_logs = worker_logs / "cut-off"
    cut_logs.mkdir()
    through_proxy = proxy.url(int(urlsplit(redis_url).path.strip("/") or 0))
    try:
        with (
            running_sites(["127.0.0.93"], 120, 4, delay=0.05) as (graph, servers),
            local_workers(
                redis_url, redis_url, fetchers=1, parsers=1, log_dir=str(worker_logs)
            ) as healthy,
            local_workers(
                through_proxy,
                through_proxy,
                fetchers=1,
                parsers=1,
                log_dir=str(cut_logs),
            ) as cut_off,
        ):
            # The fetch process (a threads pool: its id is its own pid's) is the one watched.
            ids = {f"{socket.gethostname()}-{cut_off[0].pid}"}
            seeds = [servers[0].base_url + "/"]
            crawl = start_crawl(
                seeds, settings=settings, allow_private_networks=True, rate=12.0, concurrency=4
            )
            wait_until(lambda: held_by(crawl, ids), timeout=60, interval=0.02)
            proxy.stop()
            cut_at = time.monotonic()
            wait_until(lambda: not held_by(crawl, ids), timeout=60, interval=0.2)
            taken_back = time.monotonic() - cut_at
            time.sleep(max(0.0, 30 - taken_back))  # a partition longer than any timeout
            assert all(p.poll() is None for p in cut_off), "a partitioned worker exited"
            # Its calls ended in timeouts while cut off: none waited for the link to heal.
            log = "".join(f.read_text() for f in cut_logs.glob("fetch*.log"))
            assert "TimeoutError" in log or "Timeout reading from socket" in log, log[-2000:]
            proxy.heal()
            healed = time.time()
            # It rejoins: it beats again.
            wait_until(
                lambda: all(
                    workers.beats(crawl.client, Keys(settings.key_prefix)).get(w, 0) > healed
                    for w in ids
                ),
                timeout=60,
            )
            summary = crawl.wait(timeout=180)
            stop_together([*healthy, *cut_off])
    finally:
        proxy.close()
    print(f"taken back {taken_back:.1f}s after the partition")
    assert taken_back <= TAKEN_BACK_WITHIN
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
