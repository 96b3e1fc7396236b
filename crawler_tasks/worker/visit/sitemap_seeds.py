"""Sitemaps (sitemaps.org) as seeds, for crawls started with ``sitemaps=True`` (off by default).

A sitemap file is a request to a host like any page, so it is not fetched on the side: it goes
through the frontier and waits for its host's token, lease and Retry-After.

1. The first time a process reads an origin's robots.txt for a crawl (``fetch_step``), the
   ``Sitemap:`` URLs it lists (at most :data:`MAX_PER_ROBOTS`) go with the URL's decision
   (:func:`found`); once the lease is back, ``settle`` adds them to the crawl's set of sitemap
   files and admits them at depth 0, through the crawl's scope check (:func:`discover`). A
   marker created with ``SET NX`` per crawl and origin (``CrawlKeys.sitemap_origin``) makes
   that happen once per crawl whichever worker sees robots.txt first; the in-process memo
   spares later fetches that round trip. The crawl's Bloom filter admits each URL once, so a
   sitemap listed twice (or also linked from a page) is fetched once.
2. When a URL of that set (or of its own origin's ``Sitemap:`` lines, read just now) is
   released, the fetch step requests it as a sitemap file (:func:`fetch`) instead of a page;
   once the lease is back, ``settle`` uses it (:func:`used`): a sitemap index adds its child
   sitemaps the same way (at most :data:`MAX_FILES` sitemap files per crawl, counted in the
   ``sitemap_files`` counter); a urlset (or a plain-text sitemap, one URL per line) admits its
   ``<loc>`` URLs at depth 0 through the scope check (at most :data:`MAX_URLS` per file). The
   sitemap's own record says what it held.

Bounded whatever the server sends: the body is at most ``max_body_bytes`` as fetched; a gzip
body (``.xml.gz`` served as a file: the fetcher has already removed any ``Content-Encoding``)
is inflated by :mod:`gzip` up to :data:`MAX_XML_BYTES` and cut there; lxml parses without
entities, DTDs or network access, incrementally, and recovers what a cut file holds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ...errors import CrawlerError
from ...state import formats
from ...state.formats import Counter, Outcome
from ...web.fetcher import Response
from ...web.sitemaps import normalised, normalised_lastmods, parse
from .outcome import Decision, Final, Next

if TYPE_CHECKING:
    from ...web.robots import Robots
    from .trip import Visit

#: Sitemap: lines of one robots.txt used.
MAX_PER_ROBOTS = 20
#: Sitemap files (from robots.txt and from indexes) one crawl fetches at most.
MAX_FILES = 1000


def found(visit: Visit, origin: str, robots: Robots) -> list[str] | None:
    """``origin``'s robots.txt ``Sitemap:`` URLs, the first time this process looks at them
    for the crawl (for :func:`discover`, after the lease); None after that."""
    if not visit.ctx.first_sitemap_look(visit.store.id, origin):
        return None
    return robots.sitemaps[:MAX_PER_ROBOTS]


def discover(visit: Visit, origin: str, urls: list[str]) -> int:
    """Admit ``origin``'s ``Sitemap:`` URLs (:func:`found`), if this crawl sees it first.
    Returns how many sitemap files were admitted now."""
    if visit.store.sitemaps.first_origin(origin):
        return _add_files(visit, urls)
    return 0


def is_sitemap(visit: Visit, listed: list[str] | None) -> bool:
    """Is the visit's URL a sitemap file of the crawl: marked so, or in ``listed``, its own
    origin's ``Sitemap:`` lines read just now (marked by ``settle``, after its lease)?"""
    if listed and visit.url in normalised(listed):
        return True
    return visit.store.sitemaps.is_sitemap(visit.url)


def fetch(visit: Visit) -> Decision:
    """The sitemap file's request, its host's lease held: its response, used once the
    lease is back (:func:`used`), or its failure."""
    scope = visit.store.admission.scope
    try:
        response = visit.runtime.fetch(
            visit.url, lambda target: "out_of_scope" if scope.check(target) else None, {}
        )
    except CrawlerError as exc:
        error = f"sitemap_{exc.reason}"
        final = Final(
            visit.url,
            0,
            error=error,
            extra={"detail": str(exc)[:500], "fetched_at": time.time()},
            counters={Counter.FAILED.value: 1, formats.failed(error): 1},
        )
        return Decision.record(final)
    return Decision(Next.SITEMAP, response=response)


def used(visit: Visit, response: Response) -> Final:
    """What a fetched sitemap file becomes, its lease returned: its WARC records, the
    sitemaps or URLs it lists admitted, its record."""
    store, status, body = visit.store, response.status, response.body
    final = Final(
        visit.url,
        0,
        status=status,
        final_url=response.final_url,
        content_type=response.content_type,
        extra={"fetched_at": time.time(), "bytes": len(body)},
        counters={
            Counter.FETCHED.value: 1,
            formats.status_code(status): 1,
            Counter.BYTES.value: len(body),
        },
    )
    visit.runtime.write_warc(response)
    if not 200 <= status < 300:
        return _failed(final, Outcome.SITEMAP_STATUS)
    parsed = parse(body)
    locs = normalised(parsed.locs)
    info = {"kind": parsed.kind, "locs": len(locs), "truncated": parsed.truncated}
    final.extra["sitemap"] = info
    if parsed.kind == "sitemapindex":
        info["sitemaps_added"] = _add_files(visit, locs)
    elif parsed.kind in ("urlset", "text"):
        if store.recrawl is not None and parsed.lastmods:  # adaptive: issue 35
            store.recrawl.note_lastmods(normalised_lastmods(parsed.lastmods))
        final.counters.update(store.admission.links(locs, 0))
    else:
        return _failed(final, Outcome.SITEMAP_INVALID)
    final.counters[Counter.SITEMAPS.value] = 1
    return final


def _add_files(visit: Visit, urls: list[str]) -> int:
    """Mark ``urls`` as sitemap files of the crawl and admit them, within MAX_FILES."""
    store = visit.store
    urls = normalised(urls)
    if not urls:
        return 0
    total = store.stats.add(Counter.SITEMAP_FILES.value, len(urls))
    room = len(urls) - max(0, total - MAX_FILES)
    if room < len(urls):  # give back what does not fit, so the counter stays exact
        store.stats.add(Counter.SITEMAP_FILES.value, max(room, 0) - len(urls))
    urls = urls[: max(room, 0)]
    if urls:
        store.sitemaps.mark(urls)
        store.admission.links(urls, 0)
    return len(urls)


def _failed(final: Final, outcome: Outcome) -> Final:
    final.error = outcome.value
    final.counters.update({Counter.FAILED.value: 1, formats.failed(outcome.value): 1})
    return final
