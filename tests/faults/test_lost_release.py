"""A URL released to a living fetch process whose message another process took and lost
(issue 50 item 1). Host affinity marks a released URL as its host's process ("r:<holder>")
even when it goes to a shared fetch queue; any fetch process may take it there, and one that
is killed (or frozen with its BRPOP pending) before starting it loses the message, which is
kept in that process's memory only. Before, the URL waited for the lost-message rule (15 s,
and only while every fetch queue was empty) plus a confirmation, 17-25 s, and a host whose
lease it held waited with it. Now it is back in the frontier within 10 s
(worker/dispatch/lost.py). At the project's default timings, real workers, real Redis."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.faults.test_faults import cluster, one_host_each, start, wait
from tests.support.sitegen import running_sites

#: The project's defaults (the fault suite's QUICK ones hide the lost-message rule's delay).
DEFAULTS = {
    "CRAWLER_WORKER_DEAD_SECONDS": "10",
    "CRAWLER_LOST_MESSAGE_SECONDS": "15",
    "CRAWLER_ORPHAN_RECORD_SECONDS": "30",
}
#: Seconds within which a lost release is fetched again: 10 s back in the frontier, and the
#: busy machine's slack for its request.
BOUND = 12.0


def longest_gap(times: list[float], since: float) -> float:
    """The longest wait between two requests of the site after ``since``."""
    after = sorted([since, *(t for t in times if t >= since)])
    return max((b - a for a, b in zip(after, after[1:], strict=False)), default=0.0)


@pytest.mark.allow_worker_errors(".*")
def test_a_release_lost_by_the_process_that_took_it_is_back_within_10_s(
    settings, redis_url, tmp_path
):  # type: ignore[no-untyped-def]
    """fetch1 kills itself when it takes its first fetch message, before starting it (the
    fault point before_start); the one host of the crawl is fetch2's (its URLs are marked
    r:fetch2), at concurrency 1, so the lost URL holds the host's only lease: the site sees
    no request until it is taken back. The longest wait after fetch1's death stays within
    BOUND, and no URL is requested twice (none was)."""
    with cluster(redis_url, tmp_path, **DEFAULTS) as c:
        c.start("fetch1", "fetch", {"CRAWLER_FAULT_POINT": "before_start"})
        c.start("fetch2", "fetch")
        host = one_host_each(c, settings, ("fetch1", "fetch2"))[1]
        with running_sites([host], 60, 4) as (_graph, servers):
            _seeds, crawl = start(settings, servers, concurrency=1, rate=5.0)
            c.procs["fetch1"].wait(60)  # it took a message and died with it
            died_at = time.monotonic()
            summary = wait(crawl, 120)
            requests = [r for r in servers[0].requests() if r.path != "/robots.txt"]
    gap = longest_gap([r.time for r in requests], died_at)
    twice = [p for p, n in Counter(r.path for r in requests).items() if n > 1]
    print(f"longest wait for a request after the death: {gap:.1f} s")
    assert summary["status"] == "finished" and summary["counters"].get("failed", 0) == 0
    assert gap <= BOUND, f"the site waited {gap:.1f} s for the lost URL"
    assert not twice, twice
