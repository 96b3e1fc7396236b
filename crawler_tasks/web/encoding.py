"""Decoding an HTML body to text: which encoding the bytes are in. Pure functions.

:func:`decode` takes the first that applies: a byte-order mark; UTF-8 when the non-ASCII bytes
are all valid UTF-8 (mislabelled UTF-8 is common, legacy text that happens to be valid UTF-8 is
not, so this beats declarations); the ``Content-Type`` charset, then ``<meta>``, whichever
decodes with few errors; ``charset_normalizer`` detection (windows-1252 wins ties: the WHATWG
default); the first declaration, else windows-1252, with replacement characters.
"""

from __future__ import annotations

import charset_normalizer
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    to_unicode,
)

_DETECT_BYTES = 32 * 1024  # charset_normalizer cost grows with input; a prefix is enough


def decode(body: bytes, content_type: str | None) -> tuple[str, str]:
    """(Python codec name, text) of ``body``; never fails (replacement characters at worst)."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding and bom:
        return bom_encoding, to_unicode(body[len(bom) :], bom_encoding)
    if not body.isascii() and _is_utf8(body):
        return "utf-8", body.decode("utf-8", "replace")
    header = _usable(http_content_type_encoding(content_type), header=True)
    declared = [e for e in (header, _usable(html_body_declared_encoding(body))) if e]
    for encoding in declared:
        text = to_unicode(body, encoding)
        if _mostly_clean(text):
            return encoding, text
    detected = _detect(body) if not body.isascii() else None
    if detected:
        text = to_unicode(body, detected)
        if _mostly_clean(text) or not declared:
            return detected, text
    # Undeclared, undetected: windows-1252, like browsers; it keeps every byte as some character
    encoding = declared[0] if declared else "utf-8" if body.isascii() else "cp1252"
    return encoding, to_unicode(body, encoding)


def _usable(encoding: str | None, *, header: bool = False) -> str | None:
    if encoding is None or not encoding.startswith(("utf-16", "utf-32")):
        return encoding
    # WHATWG: an ASCII <meta> can't truly declare UTF-16/32 (the bytes say it's UTF-8); a header
    # can, and without a BOM that means little-endian.
    return encoding[:6] + "-le" if header else "utf-8"


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data" and exc.start >= len(body) - 3
    return True


def _mostly_clean(text: str) -> bool:
    """Few decoding errors: a stray byte in an otherwise right encoding is no reason to switch."""
    bad = text.count("\ufffd")
    return bad == 0 or bad * 10 <= len(text) - len(text.encode("ascii", "ignore")) - bad


def _detect(body: bytes) -> str | None:
    matches = charset_normalizer.from_bytes(body[:_DETECT_BYTES])
    best = matches.best()
    if best is None:
        return None
    # Short or repetitive text leaves several code pages tied, listed in no useful order: prefer
    # windows-1252 (the WHATWG default), then one in which some language was recognised.
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    if any("cp1252" in m.could_be_from_charset for m in tied):
        return "cp1252"
    return str(next((m for m in tied if m.language != "Unknown"), best).encoding)
