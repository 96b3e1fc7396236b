"""Sitemaps (sitemaps.org) as seeds, for crawls started with ``sitemaps=True`` (off by default).

A sitemap file is a request to a host like any page, so it is not fetched on the side: it goes
through the frontier and waits for its host's token, lease and Retry-After.

1. The first time a crawl sees an origin's robots.txt (``fetch_step._robots``), the ``Sitemap:``
   URLs it lists (at most :data:`MAX_PER_ROBOTS`) are added to the crawl's set of sitemap
   files and admitted at depth 0, through the crawl's scope check. A marker created with
   ``SET NX`` per crawl and origin (``CrawlKeys.sitemap_origin``) makes that happen once per
   crawl whichever worker sees robots.txt first; an in-process memo spares later fetches that
   round trip. The crawl's Bloom filter admits each URL once, so a sitemap listed twice (or
   also linked from a page) is fetched once.
2. When a URL of that set is released, ``_robots`` hands it to :meth:`Sitemaps.fetch` instead
   of the normal fetch: a sitemap index adds its child sitemaps the same way (at most
   :data:`MAX_FILES` sitemap files per crawl, counted in the ``sitemap_files`` counter); a
   urlset (or a plain-text sitemap, one URL per line) admits its ``<loc>`` URLs at depth 0
   through the scope check (at most :data:`MAX_URLS` per file). The sitemap's own record says
   what it held.

Bounded whatever the server sends: the body is at most ``max_body_bytes`` as fetched; a gzip
body (``.xml.gz`` served as a file: the fetcher has already removed any ``Content-Encoding``)
is inflated by :mod:`gzip` up to :data:`MAX_XML_BYTES` and cut there; lxml parses without
entities, DTDs or network access, incrementally, and recovers what a cut file holds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...errors import CrawlerError
from ...state import formats
from ...state.formats import Counter, Outcome
from ...web.sitemaps import normalised, normalised_lastmods, parse

if TYPE_CHECKING:
    from ...web.robots import Robots
    from .trip import Visit

#: Sitemap: lines of one robots.txt used.
MAX_PER_ROBOTS = 20
#: Sitemap files (from robots.txt and from indexes) one crawl fetches at most.
MAX_FILES = 1000


class Sitemaps:
    """The sitemap work of one crawl, in a worker process."""

    def __init__(self, visit: Visit) -> None:
        self.visit = visit
        self.store = visit.store
        self.opts = visit.store.opts

    def discover(self, origin: str, robots: Robots) -> int:
        """Admit ``origin``'s robots.txt ``Sitemap:`` URLs, the first time this crawl sees it.
        Returns how many sitemap files were admitted now."""
        if not self.visit.ctx.first_sitemap_look(self.opts.crawl_id, origin):
            return 0
        if self.store.sitemaps.first_origin(origin):
            return self._add_files(robots.sitemaps[:MAX_PER_ROBOTS])
        return 0

    def is_sitemap(self, url: str) -> bool:
        return self.store.sitemaps.is_sitemap(url)

    def _add_files(self, urls: list[str]) -> int:
        """Mark ``urls`` as sitemap files of the crawl and admit them, within MAX_FILES."""
        urls = normalised(urls)
        if not urls:
            return 0
        total = self.store.stats.add(Counter.SITEMAP_FILES.value, len(urls))
        room = len(urls) - max(0, total - MAX_FILES)
        if room < len(urls):  # give back what does not fit, so the counter stays exact
            self.store.stats.add(Counter.SITEMAP_FILES.value, max(room, 0) - len(urls))
        urls = urls[: max(room, 0)]
        if urls:
            self.store.sitemaps.mark(urls)
            self.store.admission.links(urls, 0)
        return len(urls)

    def fetch(self, url: str) -> dict[str, Any]:
        """Fetch and use one sitemap file; returns the fields of its ``recorder.Final``."""
        runtime = self.visit.runtime
        scope = self.store.admission.scope
        try:
            response = runtime.fetch(
                url, lambda target: "out_of_scope" if scope.check(target) else None, {}
            )
        except CrawlerError as exc:
            error = f"sitemap_{exc.reason}"
            return {
                "error": error,
                "extra": {"detail": str(exc)[:500], "fetched_at": time.time()},
                "counters": {Counter.FAILED.value: 1, formats.failed(error): 1},
            }
        status, body = response.status, response.body
        result: dict[str, Any] = {
            "status": status,
            "final_url": response.final_url,
            "content_type": response.content_type,
            "extra": {"fetched_at": time.time(), "bytes": len(body)},
            "counters": {
                Counter.FETCHED.value: 1,
                formats.status_code(status): 1,
                Counter.BYTES.value: len(body),
            },
        }
        runtime.write_warc(response)
        if not 200 <= status < 300:
            return _failed(result, Outcome.SITEMAP_STATUS)
            return result
        parsed = parse(body)
        locs = normalised(parsed.locs)
        info = {"kind": parsed.kind, "locs": len(locs), "truncated": parsed.truncated}
        result["extra"]["sitemap"] = info
        if parsed.kind == "sitemapindex":
            info["sitemaps_added"] = self._add_files(locs)
        elif parsed.kind in ("urlset", "text"):
            if self.store.recrawl is not None and parsed.lastmods:  # adaptive: issue 35
                self.store.recrawl.note_lastmods(normalised_lastmods(parsed.lastmods))
            result["counters"].update(self.store.admission.links(locs, 0))
        else:
            return _failed(result, Outcome.SITEMAP_INVALID)
        result["counters"][Counter.SITEMAPS.value] = 1
        return result


def _failed(result: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    result["error"] = outcome.value
    result["counters"].update({Counter.FAILED.value: 1, formats.failed(outcome.value): 1})
    return result
