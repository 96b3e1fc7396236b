"""Pages parsed in the fetch task (``inline_parse_bytes``): the same exact page set and
counters as with a parse task, no parse task, and no body through Redis; larger pages still
go to the parse queue. In-process (tests/support/driver.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.integration.test_pipeline import start
from tests.support.driver import Driver
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import running_sites


@pytest.mark.parametrize("limit", [1 << 20, 1])
def test_inline_parse_keeps_the_crawl_exact(settings, client, limit):  # type: ignore[no-untyped-def]
    settings = dataclasses.replace(settings, inline_parse_bytes=limit)
    driver = Driver(settings)
    try:
        with running_sites(["127.0.0.73", "127.0.0.74"], 60, 6) as (graph, servers):
            seeds, crawl = start(settings, servers)
            summary = driver.run(crawl)
    finally:
        driver.close()
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert summary["counters"]["parsed"] > 0
    parses = [r for r in driver.results if r[0] == "parse"]
    assert (parses == []) == (limit > 1)  # only pages over the limit are parse tasks
    assert not list(client.scan_iter(match="*:body:*"))
