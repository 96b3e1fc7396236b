"""Is a response HTML? Its ``Content-Type`` says so, or, when the server did not know (none,
``application/octet-stream``), the first bytes of its body, sniffed as browsers do (the WHATWG
MIME sniffing standard's HTML signatures): a page a browser would render is parsed.
"""

from __future__ import annotations

_SNIFF_WS = b"\t\n\x0c\r "
_SNIFF_TAGS = (
    b"<!doctype html",
    b"<html",
    b"<head",
    b"<body",
    b"<script",
    b"<iframe",
    b"<h1",
    b"<div",
    b"<font",
    b"<table",
    b"<a",
    b"<style",
    b"<title",
    b"<b",
    b"<br",
    b"<p",
)
_SNIFF_END = (b">", b" ", b"\t", b"\n", b"\r", b"\x0c")
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Types servers send when they don't know: the body decides (as browsers sniff them).
_UNKNOWN_TYPES = frozenset(
    {
        "",
        "application/octet-stream",
        "binary/octet-stream",
        "application/unknown",
        "unknown/unknown",
        "*/*",
    }
)


def is_html(content_type: str | None, body_start: bytes) -> bool:
    """True for an HTML ``Content-Type``; a missing or ``octet-stream`` one is sniffed."""
    mime = (content_type or "").partition(";")[0].strip().lower()
    if mime in _HTML_TYPES:
        return True
    if mime not in _UNKNOWN_TYPES:
        return False  # text/plain included: browsers never render it as HTML either
    head = body_start[:1445]  # the WHATWG sniffing window
    for bom in (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"):
        if head.startswith(bom):  # dropping NULs turns ASCII markup in UTF-16 into bytes
            head = head[len(bom) :].replace(b"\x00", b"")
    head = head.lstrip(_SNIFF_WS)[:16].lower()
    # WHATWG wants a space or ">" after the name; any whitespace is a harmless widening
    return head.startswith(b"<!--") or any(
        head.startswith(tag) and head[len(tag) : len(tag) + 1] in _SNIFF_END for tag in _SNIFF_TAGS
    )
