"""Sitemaps (sitemaps.org) as seeds, for crawls started with ``sitemaps=True`` (off by default).

A sitemap file is a request to a host like any page, so it is not fetched on the side: it goes
through the frontier and waits for its host's token, lease and Retry-After.

1. The first time a crawl sees an origin's robots.txt (``pipeline._robots``), the ``Sitemap:``
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
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..errors import CrawlerError
from ..web.sitemaps import normalised, parse

if TYPE_CHECKING:
    from ..state.options import CrawlOptions
    from ..web.robots import Robots
    from .context import Context

#: Sitemap: lines of one robots.txt used.
MAX_PER_ROBOTS = 20
#: Sitemap files (from robots.txt and from indexes) one crawl fetches at most.
MAX_FILES = 1000
#: (crawl id, origin) pairs this process has seen the robots.txt sitemaps of.
_MEMO_SIZE = 10_000
_memo: OrderedDict[tuple[str, str], None] = OrderedDict()


class Sitemaps:
    """The sitemap work of one crawl, in a worker process."""

    def __init__(self, ctx: Context, opts: CrawlOptions) -> None:
        self.ctx = ctx
        self.opts = opts
        self.ck = ctx.keys.crawl(opts.crawl_id)

    def discover(self, origin: str, robots: Robots) -> int:
        """Admit ``origin``'s robots.txt ``Sitemap:`` URLs, the first time this crawl sees it.
        Returns how many sitemap files were admitted now."""
        memo = (self.opts.crawl_id, origin)
        if memo in _memo:
            return 0
        added = 0
        if self.ctx.client.set(self.ck.sitemap_origin(origin), "1", nx=True):
            added = self._add_files(robots.sitemaps[:MAX_PER_ROBOTS])
        _memo[memo] = None
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
        return added

    def is_sitemap(self, url: str) -> bool:
        return bool(self.ctx.client.sismember(self.ck.sitemaps, url))

    def _add_files(self, urls: list[str]) -> int:
        """Mark ``urls`` as sitemap files of the crawl and admit them, within MAX_FILES."""
        urls = normalised(urls)
        if not urls:
            return 0
        total = int(self.ctx.client.hincrby(self.ck.stats, "sitemap_files", len(urls)))
        room = len(urls) - max(0, total - MAX_FILES)
        if room < len(urls):  # give back what does not fit, so the counter stays exact
            self.ctx.client.hincrby(self.ck.stats, "sitemap_files", max(room, 0) - len(urls))
        urls = urls[: max(room, 0)]
        if urls:
            self.ctx.client.sadd(self.ck.sitemaps, *urls)
            self.ctx.admit_links(self.opts, urls, 0)
        return len(urls)

    def fetch(self, url: str) -> dict[str, Any]:
        """Fetch and use one sitemap file; returns the fields of its ``pipeline.Final``."""
        ctx, opts = self.ctx, self.opts
        scope = ctx.scope(opts)
        try:
            response = ctx.fetcher.get(
                url,
                allow_private=opts.allow_private_networks,
                follow=lambda target: "out_of_scope" if scope.check(target) else None,
            )
        except CrawlerError as exc:
            error = f"sitemap_{exc.reason}"
            return {
                "error": error,
                "extra": {"detail": str(exc)[:500], "fetched_at": time.time()},
                "counters": {"failed": 1, f"failed:{error}": 1},
            }
        status, body = response.status, response.body
        result: dict[str, Any] = {
            "status": status,
            "final_url": response.final_url,
            "content_type": response.content_type,
            "extra": {"fetched_at": time.time(), "bytes": len(body)},
            "counters": {"fetched": 1, f"status:{status}": 1, "bytes": len(body)},
        }
        ctx.write_warc(opts, response)
        if not 200 <= status < 300:
            result["error"] = "sitemap_status"
            result["counters"].update({"failed": 1, "failed:sitemap_status": 1})
            return result
        parsed = parse(body)
        locs = normalised(parsed.locs)
        info = {"kind": parsed.kind, "locs": len(locs), "truncated": parsed.truncated}
        result["extra"]["sitemap"] = info
        if parsed.kind == "sitemapindex":
            info["sitemaps_added"] = self._add_files(locs)
        elif parsed.kind in ("urlset", "text"):
            result["counters"].update(ctx.admit_links(opts, locs, 0))
        else:
            result["error"] = "sitemap_invalid"
            result["counters"].update({"failed": 1, "failed:sitemap_invalid": 1})
            return result
        result["counters"]["sitemaps"] = 1
        return result
