"""A big crawl cancelled beside a small one (issue 50 item 8), for the functional test
(tests/integration/test_cancel.py: 20,000 seeds) and the bench (bench/cancel.py: 100,000).

The big crawl's seeds are pages of one host served by any path under ``/p/`` (a tiny page
without links): its frontier holds nearly all of them when it is cancelled. The neighbour is
a small site of its own host, crawled at its own rate meanwhile; its pages/s before and after
the cancel say whether the cancel slowed it."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from crawler_tasks import Crawl, start_crawl
from crawler_tasks.settings import Settings
from tests.support.sitegen import Handler

PAGE = b"<html><head><title>p</title></head><body>p</body></html>"


def page(h: Handler) -> None:
    h.send_body(200, PAGE, "text/html")


def start_big(settings: Settings, base_url: str, seeds: int, rate: float) -> Crawl:
    """A crawl of ``seeds`` pages of one host at ``rate`` requests/s."""
    urls = [f"{base_url}/p/{i}" for i in range(seeds)]
    return start_crawl(
        urls, settings=settings, allow_private_networks=True, obey_robots=False, rate=rate,
        concurrency=4, max_depth=0,
    )  # fmt: skip


@dataclass
class Cancelled:
    """What the cancel of the big crawl did: the seconds from cancel() to its final status,
    the progress read just after cancel() returned, its summary and records."""

    settled_s: float
    first: dict[str, Any]
    statuses: list[str]
    summary: dict[str, Any]
    records: list[dict[str, Any]]

    def accounting(self) -> list[str]:
        """What is wrong with its counts (nothing: every admitted URL is once a record or
        once counted cancelled, none outstanding)."""
        c, wrong = self.summary["counters"], []
        urls = Counter(r["url"] for r in self.records)
        if urls and urls.most_common(1)[0][1] > 1:
            wrong.append(f"a URL recorded twice: {urls.most_common(1)}")
        if len(self.records) + c.get("cancelled", 0) != c["admitted"]:
            wrong.append(f"{len(self.records)} records + {c.get('cancelled')} cancelled != {c}")
        if c["done"] != len(self.records):
            wrong.append(f"done {c['done']} != {len(self.records)} records")
        return wrong


def cancel_and_watch(big: Crawl, timeout: float) -> Cancelled:
    """Cancel ``big``; read its status every 50 ms until it is final (at most ``timeout`` s)."""
    begun = time.monotonic()
    assert big.cancel()
    first = big.progress()
    statuses = [first["status"]]
    while not big.finished and time.monotonic() - begun < timeout:
        time.sleep(0.05)
        statuses.append(big.progress()["status"])
    settled = time.monotonic() - begun
    # The status can turn final between a reading and the loop's look at ``finished`` (the
    # last reading then says cancelling: seen once under make test's load): read it once more.
    statuses.append(big.progress()["status"])
    summary = big.wait(timeout=5)
    return Cancelled(settled, first, statuses, summary, list(big.pages()))


def done_at(crawl: Crawl) -> tuple[float, int]:
    """(now, the crawl's final URLs)."""
    return time.monotonic(), int(crawl.progress()["done"])


def pace(a: tuple[float, int], b: tuple[float, int]) -> float:
    """Pages/s between two :func:`done_at` readings."""
    return (b[1] - a[1]) / max(b[0] - a[0], 1e-9)
