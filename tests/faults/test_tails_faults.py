"""A process killed at each step of a flush or a refill of the frontier's tails
(state/tails.py: between the chunk's write and its swap into the index, after the swap,
between a chunk's read and its move into the head, after the move and before its delete):
the crawl still records every reachable page exactly once. Every host spills (heads of 4
URLs, chunks of 4), so the points are reached many times."""

from __future__ import annotations

import pytest

from tests.faults.test_faults import PARSE_TASKS, cluster, site, start, wait
from tests.support.exact import assert_exact_pages, reachable_urls

POINTS = [
    "frontier_flush_written",
    "frontier_flush_swapped",
    "frontier_refill_read",
    "frontier_refill_moved",
]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.allow_worker_errors(".*")
def test_killed_in_a_flush_or_refill(settings, redis_url, tmp_path, point):  # type: ignore[no-untyped-def]
    with site() as (graph, servers), cluster(redis_url, tmp_path, **PARSE_TASKS) as c:
        c.start("fetch1", "fetch", {"CRAWLER_FAULT_POINT": f"{point}:3"})
        c.start("fetch2", "fetch")
        c.start("parse", "parse")
        seeds, crawl = start(settings, servers, frontier_head=4, frontier_chunk=4)
        killed = c.restarted_after_fault("fetch1", crawl)
        summary = wait(crawl, 150)
    assert killed, f"fetch1 never reached {point}: the test checked nothing"
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert crawl.store.frontier.tails.store.size()[0] <= 1  # at most the one a kill left
