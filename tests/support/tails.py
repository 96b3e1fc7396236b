"""A crawl whose hosts spill at once (state/tails.py): no pace (its releases are the
frontier's alone), heads of 4 URLs, chunks of 8, a chunk store under the crawl's output."""

from __future__ import annotations

import math
from typing import Any

from crawler_tasks import start_crawl


def spilling_crawl(seeds: list[str], settings: Any, client: Any, **options: Any) -> Any:
    """``options``: more crawl options (frontier_flush_seconds...) or these replaced."""
    given: dict[str, Any] = {
        "rate": math.inf,
        "concurrency": 1000,
        "frontier_head": 4,
        "frontier_chunk": 8,
    }
    return start_crawl(seeds, settings=settings, client=client, **{**given, **options})
