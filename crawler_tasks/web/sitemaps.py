"""Sitemap files (sitemaps.org): bounded, safe parsing of urlsets, indexes and plain-text
sitemaps. How a crawl uses them is :mod:`crawler_tasks.worker.visit.sitemap_seeds`."""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lxml import etree

from ..errors import InvalidURL
from .urls import normalize

#: URLs taken from one sitemap file (the protocol's own limit).
MAX_URLS = 50_000
#: Bytes of XML parsed per file, after gzip (the protocol's limit is 50 MB uncompressed).
MAX_XML_BYTES = 50 * 1024 * 1024


@dataclass
class Parsed:
    kind: str  # "urlset", "sitemapindex", "text" or the unknown root element's name
    locs: list[str] = field(default_factory=list)
    truncated: bool = False  # cut at MAX_XML_BYTES or MAX_URLS (what came before is kept)
    #: A urlset's ``<lastmod>`` per raw ``<loc>`` (unix seconds), where it parses.
    lastmods: dict[str, float] = field(default_factory=dict)


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
                _entry_done(parsed, element, name)
    except etree.XMLSyntaxError:
        parsed.truncated = True
    return parsed


def _entry_done(parsed: Parsed, element: etree._Element, name: str) -> None:
    if name == "url":
        _lastmod(parsed, element)
    element.clear()
    while element.getprevious() is not None:  # keep memory flat on big files
        del element.getparent()[0]


def _lastmod(parsed: Parsed, url: etree._Element) -> None:
    texts = {
        etree.QName(c).localname: (c.text or "").strip() for c in url if isinstance(c.tag, str)
    }
    when = w3c_time(texts.get("lastmod", ""))
    if texts.get("loc") and when is not None:
        parsed.lastmods[texts["loc"]] = when


def w3c_time(text: str) -> float | None:
    """A sitemap's W3C datetime (``2024-05-01``, ``2024-05-01T10:00:00+02:00``, ``...Z``) as
    unix seconds, UTC when it names no zone; None for anything else (a year alone, a month)."""
    if len(text) < 10:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def normalised(urls: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for url in urls:
        try:
            out[normalize(url)] = None
        except InvalidURL:
            continue
    return list(out)


def normalised_lastmods(lastmods: dict[str, float]) -> dict[str, float]:
    """``Parsed.lastmods`` by normalised URL (invalid URLs left out)."""
    out = {}
    for url, when in lastmods.items():
        try:
            out[normalize(url)] = when
        except InvalidURL:
            continue
    return out
