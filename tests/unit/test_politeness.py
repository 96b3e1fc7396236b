"""Politeness, the pure part: reading a sitemap is bounded. The rates on the wire:
tests/integration/test_politeness.py."""

from __future__ import annotations

import gzip

from crawler_tasks.web.sitemaps import inflate, parse

# --- sitemap parsing -----------------------------------------------------------------------------


def sitemap_xml(root: str, item: str, locs: list[str]) -> bytes:
    entries = "".join(f"<{item}><loc>{loc}</loc></{item}>" for loc in locs)
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
    return f'<?xml version="1.0" encoding="UTF-8"?><{root} xmlns="{ns}">{entries}</{root}>'.encode()


def test_sitemap_parsing_is_bounded():
    doc = sitemap_xml("urlset", "url", [f"http://a/{i}" for i in range(10)])
    assert parse(doc).locs[:2] == ["http://a/0", "http://a/1"]
    assert parse(gzip.compress(doc)).kind == "urlset"
    capped = parse(doc, max_urls=3)
    assert len(capped.locs) == 3 and capped.truncated
    bomb = gzip.compress(b"<urlset>" + b" " * (8 << 20) + b"</urlset>")
    data, cut = inflate(bomb, limit=1 << 20)
    assert len(data) == 1 << 20 and cut
    cut_short = parse(doc[: len(doc) // 2])
    assert cut_short.kind == "urlset" and 1 <= len(cut_short.locs) < 10
    entity = b'<!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]><urlset><url><loc>&x;</loc></url></urlset>'
    assert parse(entity).locs == []
    assert parse(b"http://a/1\n\nhttp://a/2\n").locs == ["http://a/1", "http://a/2"]
    assert parse(b"<html><body>nope</body></html>").kind == "html"
