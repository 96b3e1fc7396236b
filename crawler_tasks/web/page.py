"""HTML page -> metadata and outlinks. Pure functions: no Redis, no network.

:func:`extract` never raises: a hostile or broken body yields a (possibly empty) :class:`ParsedHTML`.

The body is decoded by :func:`.encoding.decode` (see that module for the order of evidence);
the text is re-encoded as UTF-8 for a parser pinned to UTF-8, so libxml2 never obeys or chokes
on in-document declarations.

Links (``<a href>``, ``<area href>``) resolve against ``<base href>``, else the page URL, with
:func:`crawler_tasks.urls.resolve` (paths UTF-8; a legacy page's query in the page's encoding,
as browsers do). Each distinct raw href is resolved once; drops are counted by the first reason
that applies: ``nofollow`` (every occurrence has ``rel=nofollow``, or the page is nofollow),
``too_many`` (past ``max_links``: not resolved, so it may include hrefs another rule would
drop), ``too_long``, ``non_http`` (``mailto:``, ``javascript:``...), ``invalid``,
``non_html_ext`` (:func:`crawler_tasks.urls.looks_non_html`: images, archives... are wasted
fetches). Hrefs resolving to an already kept URL are merged silently.

Robots directives come from ``<meta name=robots>`` and ``X-Robots-Tag``; ``none`` is ``noindex,
nofollow``. Directives with a bot prefix (``googlebot: noindex``) are ignored; comma-joined
headers are judged directive by directive, so ``googlebot: noindex, nofollow`` does honour
``nofollow``: erring towards crawling less.

Not handled: ``Link: rel=canonical`` headers, meta refresh, SVG ``xlink:href``.
"""

from __future__ import annotations

import copy
import functools
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import lxml.html
from lxml import etree

from .encoding import decode
from .simhash import simhash
from .sniff import is_html as is_html  # where it was defined before sniff.py
from .urls import looks_non_html, origin_of, resolve

log = logging.getLogger(__name__)

DROP_REASONS = ("nofollow", "non_http", "too_long", "too_many", "non_html_ext", "invalid")
_MAX_FIELD = 2048  # characters kept of a title, description or language: bounds output rows
_INVISIBLE = ("script", "style", "noscript", "template")
_SCHEME = re.compile(r"[\x00-\x20]*([A-Za-z][A-Za-z0-9+.\-\t\n\r]*):")
_TAB_NL = re.compile(r"[\t\n\r]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CHUNK = 1 << 16  # characters of text counted at once (collapsed_length): bounds the temporaries
#: Python's whitespace (``str.isspace``, what ``str.split()`` splits on) above U+00FF; Latin-1
#: encoding would turn these into "?", so they become spaces first.
_WIDE_SPACES = (
    "\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
)
#: Latin-1 byte -> 1 for a character ``str.split()`` keeps, 0 for one of its whitespace.
_KEPT_BIT = bytes(0 if chr(b).isspace() else 1 for b in range(256))
# Every tag but those extract reads (a, area, base, link, meta, title) or must skip the content
# of (script, style): a linear pattern, since `[^<>]*` can't backtrack past the next "<".
_NESTING_TAGS = re.compile(
    r"</?(?!(?:a|area|base|link|meta|title|script|style|html|head|body)[\s/>])[A-Za-z][^<>]*>",
    re.IGNORECASE,
)


class _Limits(NamedTuple):
    honour_nofollow: bool
    max_links: int
    max_url_length: int


@dataclass
class ParsedHTML:
    title: str | None = None
    description: str | None = None  # <meta name=description>
    language: str | None = None  # <html lang>, else meta http-equiv, else Content-Language
    canonical: str | None = None  # <link rel=canonical>, resolved + normalised
    text_length: int = 0  # characters of visible text, whitespace collapsed
    links: list[str] = field(default_factory=list)  # normalised, deduplicated, document order
    nofollow: bool = False  # page-level: meta robots / X-Robots-Tag
    noindex: bool = False
    encoding: str = "utf-8"  # Python codec name the body was decoded with
    links_dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    #: With ``keep_tree``: the decoded text and the whole parsed tree (head, scripts and all).
    html: str | None = None
    tree: etree._Element | None = None
    #: With ``fingerprint``: the visible text's 64-bit SimHash (web/simhash.py).
    simhash: int | None = None


def extract(
    body: bytes,
    url: str,
    *,
    content_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    max_links: int = 5000,
    max_url_length: int = 2048,
    honour_nofollow: bool = True,
    keep_tree: bool = False,
    fingerprint: bool = False,
) -> ParsedHTML:
    """Metadata and outlinks of HTML ``body`` fetched from ``url`` (post-redirect). Never raises.

    ``keep_tree`` keeps the decoded text and the parsed tree in the ParsedHTML (for a user's
    extraction hook): the visible-text walk works on a copy, so the tree is whole; copying a
    tree costs a fraction of parsing it again."""
    try:
        headers = headers or {}
        if content_type is None:
            content_type = _header(headers, "content-type")
        noindex, nofollow = _robots(_header(headers, "x-robots-tag"))
        page = ParsedHTML(noindex=noindex, nofollow=nofollow, language=_language(headers))
        page.encoding, text = decode(bytes(body), content_type)
        doc = _parse(text, html=keep_tree)
        if keep_tree:
            page.html = text
            page.tree = doc
            doc = copy.deepcopy(doc) if doc is not None else None
        if doc is not None:
            _fill(page, doc, url, _Limits(honour_nofollow, max_links, max_url_length))
            if fingerprint:
                page.simhash = simhash(_words(doc))
        return page
    except Exception:  # a bug must not kill the fetch task over one page; the log shows it
        log.warning("parse of %.300s failed", url, exc_info=True)
        return ParsedHTML()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _clean(text: str | None) -> str | None:
    """Whitespace collapsed, bounded, None when empty."""
    if not text:
        return None
    return " ".join(text.split())[:_MAX_FIELD] or None


def _language(headers: Mapping[str, str]) -> str | None:
    return _clean((_header(headers, "content-language") or "").partition(",")[0])


def _robots(value: str | None) -> tuple[bool, bool]:
    """(noindex, nofollow) of a meta robots content or an X-Robots-Tag header."""
    words: set[str] = set()
    for part in (value or "").lower().split(","):
        if ":" not in part:  # "googlebot: noindex" is another bot's business
            words.update(part.split())
    none = "none" in words
    return none or "noindex" in words, none or "nofollow" in words


def _parse(text: str, html: bool = False) -> etree._Element | None:
    """The tree of ``text``; None when it has no content at all. ``html``: lxml.html elements
    (``text_content()``, ``cssselect()``, ``iterlinks()``), for a user's extraction hook."""
    doc, complete = _parse_once(text, html)
    if not complete:
        # libxml2 gives up at 2048 levels of nesting, dropping the rest of the page. Only a few
        # tags matter here and none of them nests, so parse again without all the others.
        flat = _parse_once(_NESTING_TAGS.sub("", text), html)[0]
        doc = doc if flat is None else flat
    return doc


def _parse_once(text: str, html: bool = False) -> tuple[etree._Element | None, bool]:
    # Plain etree unless a hook wants lxml.html's API: its per-element Python class lookup
    # costs ~40% of the walk, paid only by crawls with a hook.
    kind = lxml.html.HTMLParser if html else etree.HTMLParser
    parser = kind(encoding="utf-8", huge_tree=True, remove_comments=True)
    try:
        doc = etree.fromstring(text.encode("utf-8", "replace"), parser=parser)
    except (etree.LxmlError, ValueError):
        return None, True
    return doc, not parser.error_log.filter_from_fatals()


def _fill(page: ParsedHTML, doc: etree._Element, url: str, limits: _Limits) -> None:
    base_el = doc.find(".//base[@href]")
    base = (resolve(url, base_el.get("href")) if base_el is not None else None) or url
    page.title = _title(doc)
    _read_head(page, doc, base, limits.max_url_length)
    hrefs = _hrefs(doc)
    etree.strip_elements(doc, "head", *_INVISIBLE, with_tail=False)
    page.text_length = _text_length(doc)
    page.links, page.links_dropped = _select(hrefs, base, page, limits)


def _words(doc: etree._Element) -> Iterator[str]:
    """Visible words of a stripped tree, piece by piece."""
    for piece in doc.itertext():
        yield from piece.split()


def _text_length(doc: etree._Element) -> int:
    """Length of the document's text, whitespace collapsed: libxml2 serializes the text in
    one piece (a Python loop over the text nodes was 7 % of a fetch process's Python time)."""
    return collapsed_length(etree.tostring(doc, method="text", encoding=str, with_tail=False))


def collapsed_length(text: str) -> int:
    """``len(" ".join(text.split()))`` = kept characters + words - 1, counted in C without
    the word list ``str.split`` builds (most of its cost, issue 32). Each character becomes
    one byte, 1 if kept, 0 if whitespace; as a big int, a word starts where a 1 byte follows
    a 0 byte. Chunks of :data:`_CHUNK` characters bound the temporaries; ``glued`` carries
    a word across a chunk boundary."""
    total, glued = 0, 0  # glued: 1 if the text so far ends inside a word
    for at in range(0, len(text), _CHUNK):
        piece = text[at : at + _CHUNK]
        for space in _WIDE_SPACES:
            if space in piece:  # no scan at all unless piece holds characters above U+00FF
                piece = piece.replace(space, " ")
        kept = piece.encode("latin-1", "replace").translate(_KEPT_BIT)  # "?": kept, as it is
        bits = int.from_bytes(kept, "little")
        starts = (bits ^ (bits << 8 | glued)) & bits
        total += (bits | starts << 1).bit_count()  # bit 0 of a byte: kept; bit 1: a word start
        glued = kept[-1]
    return max(total - 1, 0)


def _title(doc: etree._Element) -> str | None:
    for el in doc.iter("title"):
        if next(el.iterancestors("svg", "math"), None) is None:  # an SVG title is a tooltip
            return _clean("".join(el.itertext()))
    return None


def _read_head(page: ParsedHTML, doc: etree._Element, base: str, max_url_length: int) -> None:
    meta_language = None
    for el in doc.iter("meta"):
        name = (el.get("name") or "").strip().lower()
        if name == "description" and page.description is None:
            page.description = _clean(el.get("content"))
        elif name == "robots":
            noindex, nofollow = _robots(el.get("content"))
            page.noindex, page.nofollow = page.noindex or noindex, page.nofollow or nofollow
        elif (el.get("http-equiv") or "").strip().lower() == "content-language":
            meta_language = meta_language or _clean((el.get("content") or "").partition(",")[0])
    lang = _clean(doc.get("lang") or doc.get("xml:lang"))
    page.language = lang or meta_language or page.language
    for el in doc.iter("link"):
        if "canonical" in (el.get("rel") or "").lower().split() and el.get("href") is not None:
            canonical = resolve(base, el.get("href"))
            if canonical is not None and len(canonical) <= max_url_length:
                page.canonical = canonical
            break


def _hrefs(doc: etree._Element) -> dict[str, bool]:
    """Distinct raw hrefs in document order -> whether any occurrence may be followed."""
    hrefs: dict[str, bool] = {}
    for el in doc.iter("a", "area"):
        href = el.get("href")
        if href is not None:
            rel = el.get("rel")
            follow = rel is None or "nofollow" not in rel.lower().split()
            hrefs[href] = hrefs.get(href, False) or follow
    return hrefs


def _select(
    hrefs: dict[str, bool], base: str, page: ParsedHTML, limits: _Limits
) -> tuple[list[str], dict[str, int]]:
    legacy = None if page.encoding.startswith("utf") else page.encoding
    dropped = dict.fromkeys(DROP_REASONS, 0)
    kept: dict[str, None] = {}
    for href, follow in hrefs.items():
        if limits.honour_nofollow and (page.nofollow or not follow):
            reason = "nofollow"
        elif len(kept) >= limits.max_links:
            reason = "too_many"
        else:
            reason, link = _check(href, base, legacy, limits.max_url_length)
            if link is not None:
                kept[link] = None
                continue
        dropped[reason] += 1
    return list(kept), dropped


def _check(href: str, base: str, legacy: str | None, max_len: int) -> tuple[str, str | None]:
    """("", resolved link) or (drop reason, None)."""
    href = href.strip()
    # Navigation links repeat on every page of a site: memoise on the part of the base the
    # result can depend on (nothing for absolute hrefs, the origin for root-relative ones).
    if href.startswith(("http://", "https://")):
        return _check_memo(href, "", legacy, max_len)
    if href.startswith("/") and not href.startswith("//"):
        return _check_memo(href, origin_of(base) + "/", legacy, max_len)
    return _check_uncached(href, base, legacy, max_len)


@functools.lru_cache(maxsize=16384)
def _check_memo(href: str, base: str, legacy: str | None, max_len: int) -> tuple[str, str | None]:
    return _check_uncached(href, base, legacy, max_len)


def _check_uncached(
    href: str, base: str, legacy: str | None, max_len: int
) -> tuple[str, str | None]:
    if len(href) > 8 * max_len:  # can't normalise down to the limit: spare resolve the work
        return "too_long", None
    if legacy is not None and not href.isascii():
        href = _legacy_query(href, legacy)
    link = resolve(base, href)
    if link is None:
        scheme = _SCHEME.match(href)
        foreign = scheme and _TAB_NL.sub("", scheme.group(1)).lower() not in ("http", "https")
        return ("non_http" if foreign else "invalid"), None
    if len(link) > max_len:
        return "too_long", None
    if looks_non_html(link):
        return "non_html_ext", None
    return "", link


def _legacy_query(href: str, encoding: str) -> str:
    """Percent-encode the query's non-ASCII characters in the page's encoding (WHATWG URL)."""
    before, mark, rest = href.partition("?")
    query = rest.partition("#")[0]  # the fragment is dropped anyway
    if not mark or query.isascii():
        return href
    return before + mark + _NON_ASCII.sub(lambda m: _escape(m.group(), encoding), query)


def _escape(char: str, encoding: str) -> str:
    try:
        data = char.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        data = f"&#{ord(char)};".encode()  # what a browser sends for an unencodable character
    return "".join(f"%{byte:02X}" for byte in data)
