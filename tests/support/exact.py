"""The suite's central promise, written once at its strongest (issue 47): a finished crawl wrote
exactly the pages it should, each once, and its counters say the same.

The fault tests (kills, outages, partitions, memory pressure) and the plain crawls check the same
thing, so a weaker copy in one of them can no longer hide a duplicate or a miscount there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from crawler_tasks.web.urls import normalize
from tests.support.sitegen import reachable


def reachable_urls(graph, seeds: Iterable[str], **kw: Any) -> set[str]:  # type: ignore[no-untyped-def]
    """The URLs a correct crawl of ``graph`` from ``seeds`` records, as records spell them."""
    return {normalize(u) for u in reachable(graph, list(seeds), **kw)}


def assert_exact_pages(
    crawl,  # type: ignore[no-untyped-def]
    want: Iterable[str],
    summary: Mapping[str, Any] | None = None,
) -> Counter[str]:
    """``crawl`` finished with one record for each URL of ``want`` and none other, and counted
    every URL once: done = admitted = the pages; every discovered URL admitted, a duplicate or
    skipped for a reason; nothing outstanding; its ``summary.json`` written. ``summary`` is what
    ``crawl.wait()`` returned (read again when not given). Returns the records' URL counts."""
    want = set(want)
    got = Counter(r["url"] for r in crawl.pages(latest=False))
    twice = [u for u, n in got.items() if n > 1]
    assert not twice, f"{len(twice)} URLs recorded more than once, e.g. {twice[:3]}"
    missing, extra = sorted(want - set(got)), sorted(set(got) - want)
    assert not missing and not extra, (len(got), len(want), missing[:5], extra[:5])
    summary = crawl.summary() if summary is None else summary
    assert summary["status"] == "finished", summary["status"]
    c = summary["counters"]
    assert c["done"] == c["admitted"] == len(want), (c["done"], c["admitted"], len(want))
    skipped = sum(summary.get("skipped", {}).values())
    assert c["discovered"] == c["admitted"] + c.get("deduplicated", 0) + skipped, (c, skipped)
    assert crawl.stats.outstanding() == 0
    files = crawl.files
    if isinstance(files, Path):
        written = (files / "summary.json").exists()
    else:  # an s3:// crawl's objects
        written = files.exists("summary.json")
    assert written, f"no summary.json in {files}"
    return got
