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

import gzip
import io
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree

from .errors import CrawlerError, InvalidURL
from .urls import normalize

if TYPE_CHECKING:
    from .options import CrawlOptions
    from .robots import Robots
    from .worker import Context

#: Sitemap: lines of one robots.txt used.
MAX_PER_ROBOTS = 20
#: Sitemap files (from robots.txt and from indexes) one crawl fetches at most.
MAX_FILES = 1000
#: URLs taken from one sitemap file (the protocol's own limit).
MAX_URLS = 50_000
#: Bytes of XML parsed per file, after gzip (the protocol's limit is 50 MB uncompressed).
MAX_XML_BYTES = 50 * 1024 * 1024
#: (crawl id, origin) pairs this process has seen the robots.txt sitemaps of.
_MEMO_SIZE = 10_000
_memo: OrderedDict[tuple[str, str], None] = OrderedDict()


@dataclass
class Parsed:
    kind: str  # "urlset", "sitemapindex", "text" or the unknown root element's name
    locs: list[str] = field(default_factory=list)
    truncated: bool = False  # cut at MAX_XML_BYTES or MAX_URLS (what came before is kept)


def inflate(body: bytes, limit: int = MAX_XML_BYTES) -> tuple[bytes, bool]:
    """(``body`` un-gzipped if it is gzip, cut at ``limit`` bytes; whether it was cut).

    A corrupt or truncated gzip stream gives what inflated before the damage."""
    if body[:2] != b"\x1f\x8b":
        return body[:limit], len(body) > limit
    out = bytearray()
    with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
        try:
            while len(out) <= limit:
                chunk = stream.read(min(1 << 16, limit + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
        except (OSError, EOFError, zlib.error):
            pass
    return bytes(out[:limit]), len(out) > limit


def parse(body: bytes, max_urls: int = MAX_URLS) -> Parsed:
    """The ``<loc>`` URLs of a sitemap or sitemap index (raw, not normalised)."""
    data, truncated = inflate(body)
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        lines = data.decode("utf-8", "replace").splitlines()
        locs = [line.strip() for line in lines if line.strip()]
        return Parsed("text", locs[:max_urls], truncated or len(locs) > max_urls)
    parsed = Parsed("", truncated=truncated)
    events = etree.iterparse(
        io.BytesIO(data),
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        recover=True,
    )
    try:
        for event, element in events:
            name = etree.QName(element).localname if isinstance(element.tag, str) else ""
            if event == "start":
                parsed.kind = parsed.kind or name
                continue
            if name == "loc" and element.text and element.text.strip():
                parent = element.getparent()
                if parent is not None and etree.QName(parent).localname in ("url", "sitemap"):
                    if len(parsed.locs) >= max_urls:
                        parsed.truncated = True
                        break
                    parsed.locs.append(element.text.strip())
            elif name in ("url", "sitemap"):
                element.clear()
                while element.getprevious() is not None:  # keep memory flat on big files
                    del element.getparent()[0]
    except etree.XMLSyntaxError:
        parsed.truncated = True
    return parsed


def _normalised(urls: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for url in urls:
        try:
            out[normalize(url)] = None
        except InvalidURL:
            continue
    return list(out)


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
        urls = _normalised(urls)
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
        locs = _normalised(parsed.locs)
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
