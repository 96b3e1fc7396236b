"""Items exactly once when a parse process is SIGKILLed between writing a page's items and its
record and the page is parsed again. Extraction hooks and on_item tasks with real workers:
tests/integration/test_hooks_workers.py."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.faults import test_faults as tf
from tests.support.paths import HOOKS
from tests.support.sitegen import running_sites


@pytest.mark.parametrize("point", ["after_items", "after_finish"])
@pytest.mark.allow_worker_errors(".*")
def test_items_exactly_once_when_the_parse_process_is_killed(settings, redis_url, tmp_path, point):  # type: ignore[no-untyped-def]
    """The parse pool's processes SIGKILL themselves the 4th time they reach ``point``: between
    a page's items and its page line, or between finish.lua and both. Every page still has its
    two items once, and the items counter agrees with the file."""
    env = {"PYTHONPATH": str(HOOKS), **tf.PARSE_TASKS}  # every page through the parse process
    with (
        running_sites(["127.0.0.152"], 40, 4, cross_host_ratio=0) as (graph, servers),
        tf.cluster(redis_url, tmp_path, **env) as c,
    ):
        c.start("fetch", "fetch")
        c.start("parse", "parse", {"CRAWLER_FAULT_POINT": f"{point}:4"})
        seeds, crawl = tf.start(settings, servers, extract="extract_hooks:two_items")
        summary = crawl.wait(timeout=120)
    html = [r["url"] for r in crawl.pages(latest=False) if r.get("items") is not None]
    assert len(html) == len(set(html)) > 20
    per_page = Counter(x["url"] for x in crawl.items(latest=False))
    assert per_page == dict.fromkeys(html, 2)
    assert summary["counters"]["items"] == 2 * len(html)
    kills = sum(log.read_text().count("signal 9") for log in (tmp_path / "logs").glob("*.log"))
    assert kills > 0, "no parse process was killed: the test proved nothing"
