"""crawler_tasks.web.page: metadata, links, robots directives, charsets, sniffing, hostile input."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_tasks.web.page import (
    _CHUNK,
    DROP_REASONS,
    ParsedHTML,
    collapsed_length,
    extract,
    is_html,
)

URL = "http://example.com/dir/page.html"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse(html: str, **kwargs: object) -> ParsedHTML:
    return extract(html.encode("utf-8"), URL, **kwargs)  # type: ignore[arg-type]


def dropped(page: ParsedHTML) -> dict[str, int]:
    return {reason: n for reason, n in page.links_dropped.items() if n}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def no_internal_error() -> Iterator[None]:
    """extract's safety net logs a warning when it catches a bug: fail the test on it."""
    handler = _Records()
    logger = logging.getLogger("crawler_tasks.web.page")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not handler.records, handler.records[0].exc_info


def check_invariants(page: ParsedHTML, max_links: int = 5000, max_url_length: int = 2048) -> None:
    assert set(page.links_dropped) == set(DROP_REASONS)
    assert all(n >= 0 for n in page.links_dropped.values())
    assert len(page.links) == len(set(page.links)) <= max_links
    for link in page.links:
        assert link.startswith(("http://", "https://")), link
        assert "#" not in link and len(link) <= max_url_length
    assert page.text_length >= 0 and page.encoding


# --- metadata ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "field", "expected"),
    [
        ("<title>Hello</title>", "title", "Hello"),
        ("<title>\n  Hello \t  world\n</title>", "title", "Hello world"),
        ("<title>Fish &amp; chips &eacute;</title>", "title", "Fish & chips é"),
        ("<title>   </title>", "title", None),
        ("<p>no title</p>", "title", None),
        ("<title>First</title><title>Second</title>", "title", "First"),
        ("<body><svg><title>tooltip</title></svg></body>", "title", None),
        ("<head><title>" + "x" * 10_000 + "</title></head>", "title", "x" * 2048),
        ('<meta name="description" content="  A  page ">', "description", "A page"),
        ('<meta name="DESCRIPTION" content="upper">', "description", "upper"),
        ('<meta name="description" content="1"><meta name="description" content="2">',
         "description", "1"),
        ('<meta name="keywords" content="k">', "description", None),
        ('<html lang="fr-CA"><p>x</p></html>', "language", "fr-CA"),
        ('<html xml:lang="de"><p>x</p></html>', "language", "de"),
        ('<meta http-equiv="Content-Language" content="es, en"><p>x', "language", "es"),
        ('<html lang="it"><meta http-equiv="content-language" content="es">', "language", "it"),
        ('<html lang=""><p>x</p></html>', "language", None),
        ('<link rel="canonical" href="/c?b=2&a=1#frag">', "canonical",
         "http://example.com/c?a=1&b=2"),
        ('<link rel="Canonical" href="other">', "canonical", "http://example.com/dir/other"),
        ('<link rel="alternate canonical" href="https://x.org/">', "canonical", "https://x.org/"),
        ('<link rel="canonical" href="javascript:void(0)">', "canonical", None),
        ('<link rel="canonical">', "canonical", None),
        ('<link rel="stylesheet" href="/s.css">', "canonical", None),
        ('<base href="/b/"><link rel="canonical" href="c">', "canonical", "http://example.com/b/c"),
    ],
)  # fmt: skip
def test_metadata(html: str, field: str, expected: object) -> None:
    assert getattr(parse(html), field) == expected


def test_language_header_is_the_fallback() -> None:
    headers = {"Content-Language": "nl-BE, fr"}
    assert parse("<p>x</p>", headers=headers).language == "nl-BE"
    assert parse('<html lang="en"><p>x</p>', headers=headers).language == "en"


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<p>Hello <b>world</b></p>", len("Hello world")),
        ("<p>a</p><script>var x = 1;</script><style>p{}</style><noscript>n</noscript>", 1),
        ("<template><p>hidden</p></template><p>  spaced \n\n out  </p>", len("spaced out")),
        ("<head><title>Not body text</title></head><body></body>", 0),
        ("<p>a<!-- a comment --></p>", 1),
    ],
)
def test_text_length(html: str, expected: int) -> None:
    assert parse(html).text_length == expected


#: Every character str.split() splits on (str.isspace), spelled out so a change shows here.
_SPACES = "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
_SPACES += "\u2028\u2029\u202f\u205f\u3000"
#: Characters str.split() keeps: Latin-1 ("?" is what wide ones encode to), wider, astral, a
#: lone surrogate, NUL, a zero-width space (not whitespace to Python).
_WORD = "ab?\xe9\xff\u0436\u201d\u4e00\U0001f600\ud800\x00\u200b"


def test_the_whitespace_set_is_pythons() -> None:
    assert "".join(c for c in map(chr, range(0x110000)) if c.isspace()) == _SPACES


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        _SPACES,
        _SPACES * 3,
        "a",
        " a",
        "a ",
        "  a  b  ",
        "a\xa0b\u3000c",
        _WORD,
        *(f"x{space}y{space}" for space in _SPACES),
        *(f"{space}{_WORD}" for space in _SPACES),
        "\u0436\u0438\u0437\u043d\u044c  \u201cquoted\u201d\u00a0\u4e2d\u6587",
        "a" * _CHUNK + "b" * 5,  # one word glued across the chunk boundary
        "a" * (_CHUNK - 1) + " " + "b",  # a space ends the first chunk
        " " * _CHUNK + "b",  # an empty first chunk
        "a" * (_CHUNK - 1) + "\u3000" + "b" * 3,  # a wide space ends the first chunk
        "ab " * (3 * _CHUNK),  # a huge page: 589,824 characters, 196,608 words
        ("\u201c" + "\xa0w" * 5 + "\u2028") * _CHUNK,
    ],
)
def test_collapsed_length_table(text: str) -> None:
    assert collapsed_length(text) == len(" ".join(text.split()))


@SETTINGS
@given(
    text=st.text(st.sampled_from(_SPACES + _WORD) | st.characters(), max_size=200),
    before=st.integers(_CHUNK - 4, _CHUNK + 4),
    glue=st.sampled_from(["a", " ", "\u3000", "\u0436"]),
)
def test_collapsed_length_property(text: str, before: int, glue: str) -> None:
    assert collapsed_length(text) == len(" ".join(text.split()))
    long = glue * before + text  # the text straddles the chunk boundary
    assert collapsed_length(long) == len(" ".join(long.split()))


def test_collapsed_length_memory_is_bounded() -> None:
    """A chunk's temporaries, not the page's: 4 MB of text, under 1 MB allocated at the peak
    (a word list of the whole text: 83 MB; this count: 0.4 MB)."""
    text = "ab " * ((4 << 20) // 3)
    tracemalloc.start()
    try:
        length = collapsed_length(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert length == len(" ".join(text.split()))
    assert peak < 1 << 20, peak


# --- links --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="a.html">', ["http://example.com/dir/a.html"]),
        ('<a href="../up">', ["http://example.com/up"]),
        ('<a href="/abs">', ["http://example.com/abs"]),
        ('<a href="//other.org/x">', ["http://other.org/x"]),
        ('<a href="https://other.org/y">', ["https://other.org/y"]),
        ('<a href="?q=1">', ["http://example.com/dir/page.html?q=1"]),
        ('<a href="">', [URL]),
        ('<a href="#top">', [URL]),
        ('<a href="/x#frag">', ["http://example.com/x"]),
        ('<a href="  /padded\n">', ["http://example.com/padded"]),
        ('<a href="/b"></a><a href="/a"></a><a href="/b#x"></a><a href="/a">', [
            "http://example.com/b", "http://example.com/a"]),
        ('<area href="/map"><a href="/a">', ["http://example.com/map", "http://example.com/a"]),
        ('<a name="anchor">no href</a><link href="/style">', []),
        ('<base href="/base/"><a href="x">', ["http://example.com/base/x"]),
        ('<base href="https://cdn.org/d/"><a href="x">', ["https://cdn.org/d/x"]),
        ('<base href="javascript:bad"><a href="x">', ["http://example.com/dir/x"]),
        ('<base target="_blank"><base href="/second/"><a href="x">',
         ["http://example.com/second/x"]),
        ('<a href="/caf\u00e9">', ["http://example.com/caf%C3%A9"]),
    ],
)  # fmt: skip
def test_links(html: str, expected: list[str]) -> None:
    page = parse(html)
    assert page.links == expected
    check_invariants(page)


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="mailto:a@b.c"><a href="javascript:void(0)"><a href="tel:+1">', {"non_http": 3}),
        ('<a href="data:text/html,x"><a href="ftp://x.org/"><a href="JavaScript:x">',
         {"non_http": 3}),
        ('<a href="java\nscript:alert(1)">', {"non_http": 1}),
        ('<a href="http://exa mple.com/"><a href="http://[::1"><a href="http://x.org:99999/">',
         {"invalid": 3}),
        ('<a href="/photo.JPG"><a href="/doc.pdf"><a href="/page.php">', {"non_html_ext": 2}),
        ('<a href="/' + "x" * 3000 + '">', {"too_long": 1}),
        ('<a href="/' + "y" * 100_000 + '">', {"too_long": 1}),
        ('<a href="/nf" rel="nofollow">', {"nofollow": 1}),
        ('<a href="/nf" rel="UGC NoFollow">', {"nofollow": 1}),
        ('<a href="/s" rel="sponsored">', {}),
        ('<a href="mailto:x" rel="nofollow">', {"nofollow": 1}),
        ('<a href="/x">1</a><a href="/x">2</a><a href="/x#y">3</a>', {}),
    ],
)  # fmt: skip
def test_dropped_links(html: str, expected: dict[str, int]) -> None:
    page = parse(html)
    assert dropped(page) == expected
    check_invariants(page)


def test_link_once_followed_is_kept() -> None:
    page = parse('<a href="/x" rel="nofollow">1</a><a href="/x">2</a><a href="/y" rel=nofollow>')
    assert page.links == ["http://example.com/x"]
    assert dropped(page) == {"nofollow": 1}


def test_max_url_length_and_max_links() -> None:
    html = "".join(f'<a href="/{i}{"z" * i}">' for i in range(20))
    page = parse(html, max_url_length=len("http://example.com/") + 10, max_links=5)
    assert page.links == [f"http://example.com/{i}{'z' * i}" for i in range(5)]
    assert dropped(page) == {"too_many": 15}
    page = parse(html, max_url_length=len("http://example.com/") + 10)
    assert len(page.links) == 10 and dropped(page) == {"too_long": 10}


# --- robots directives --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "headers", "noindex", "nofollow"),
    [
        ("", {}, False, False),
        ('<meta name="robots" content="noindex">', {}, True, False),
        ('<meta name="ROBOTS" content="NoFollow">', {}, False, True),
        ('<meta name="robots" content="noindex,nofollow">', {}, True, True),
        ('<meta name="robots" content="noindex nofollow">', {}, True, True),
        ('<meta name="robots" content="none">', {}, True, True),
        ('<meta name="robots" content="index, follow, max-snippet:50">', {}, False, False),
        ('<meta name="googlebot" content="noindex, nofollow">', {}, False, False),
        ('<meta name="robots" content="noindex"><meta name="robots" content="nofollow">', {},
         True, True),
        ("", {"X-Robots-Tag": "noindex"}, True, False),
        ("", {"x-robots-tag": "NOFOLLOW"}, False, True),
        ("", {"X-ROBOTS-TAG": "none"}, True, True),
        ("", {"X-Robots-Tag": "googlebot: noindex"}, False, False),
        ("", {"X-Robots-Tag": "otherbot: nofollow, noindex"}, True, False),
        ("", {"X-Robots-Tag": "unavailable_after: 25 Jun 2010 15:00:00 PST"}, False, False),
        ('<meta name="robots" content="noindex">', {"X-Robots-Tag": "nofollow"}, True, True),
    ],
)  # fmt: skip
def test_robots_directives(
    html: str, headers: dict[str, str], noindex: bool, nofollow: bool
) -> None:
    page = parse(html + '<a href="/a">a</a><a href="/b">b</a><a href="/a">', headers=headers)
    assert (page.noindex, page.nofollow) == (noindex, nofollow)
    if nofollow:
        assert page.links == [] and dropped(page) == {"nofollow": 2}
    else:
        assert len(page.links) == 2


def test_nofollow_not_honoured() -> None:
    html = '<meta name="robots" content="nofollow"><a href="/a" rel="nofollow">'
    page = parse(html, headers={"X-Robots-Tag": "nofollow"}, honour_nofollow=False)
    assert page.nofollow and page.links == ["http://example.com/a"]
    assert dropped(page) == {}


# --- charsets -------------------------------------------------------------------------------------

RU = "Привет мир, это тестовая страница"
JA = "日本語のページです。テストです"
FR = "Café crème brûlée, voilà très bien"


def doc(title: str, head: str = "") -> str:
    return f"<html><head>{head}<title>{title}</title></head><body><p>{title}</p></body></html>"


@pytest.mark.parametrize(
    ("body", "content_type", "title", "encoding"),
    [
        (doc(RU).encode(), None, RU, "utf-8"),
        (doc(RU, '<meta charset="windows-1251">').encode("cp1251"), None, RU, "cp1251"),
        (doc(RU).encode("cp1251"), "text/html; charset=windows-1251", RU, "cp1251"),
        (doc(RU).encode("koi8-r"), "text/html;charset=KOI8-R", RU, "koi8-r"),
        (doc(JA, '<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">')
         .encode("shift_jis"), None, JA, "cp932"),
        (doc(JA, '<meta charset="euc-jp">').encode("euc-jp"), None, JA, "euc_jp"),
        (doc(FR, '<meta charset="iso-8859-1">').encode("latin-1"), None, FR, "cp1252"),
        (doc(FR).encode("latin-1"), "text/html; charset=ISO-8859-1", FR, "cp1252"),
        # BOM beats the header
        (b"\xef\xbb\xbf" + doc(FR).encode(), "text/html; charset=iso-8859-1", FR, "utf-8"),
        ("\ufeff".encode("utf-16-le") + doc(RU).encode("utf-16-le"), None, RU, "utf-16-le"),
        ("\ufeff".encode("utf-16-be") + doc(RU).encode("utf-16-be"), None, RU, "utf-16-be"),
        # the header beats the meta when both decode cleanly
        (doc(RU, '<meta charset="koi8-r">').encode("cp1251"), "text/html; charset=cp1251", RU,
         "cp1251"),
        # wrong header: UTF-8 claimed, windows-1251 served, meta right
        (doc(RU, '<meta charset="windows-1251">').encode("cp1251"), "text/html; charset=utf-8",
         RU, "cp1251"),
        # wrong header: a server default ISO-8859-1 on a UTF-8 page
        (doc(RU, '<meta charset="utf-8">').encode(), "text/html; charset=iso-8859-1", RU, "utf-8"),
        (doc(FR).encode(), "text/html; charset=iso-8859-1", FR, "utf-8"),
        # unknown labels are ignored
        (doc(FR).encode(), "text/html; charset=no-such-thing", FR, "utf-8"),
        (doc(FR, '<meta charset="utf-7">').encode(), None, FR, "utf-8"),
        # no declaration at all: detected
        (doc(RU * 3).encode("cp1251"), None, RU * 3, "cp1251"),
        (doc(JA * 3).encode("shift_jis"), None, JA * 3, "cp932"),
        (doc(FR * 3).encode("latin-1"), None, FR * 3, "cp1252"),
        # a tiny vocabulary ties many code pages: one whose language is recognised wins
        (("<title>Привет мир</title>" + "<p>Привет мир</p>" * 20).encode("cp1251"), None,
         "Привет мир", "cp1251"),
        # an XML declaration (lxml refuses str input that has one)
        (b'<?xml version="1.0" encoding="iso-8859-1"?>\n' + doc(FR).encode("latin-1"), None, FR,
         "cp1252"),
        (b'<?xml version="1.0" encoding="utf-8"?>\n' + doc(RU).encode(), None, RU, "utf-8"),
        # a meta charset=utf-16 can't be true of ASCII markup (WHATWG: means UTF-8)
        (doc(FR, '<meta charset="utf-16">').encode(), None, FR, "utf-8"),
        # cut mid-character by the body size limit: still UTF-8
        (doc(RU).encode()[:-len("</p></body></html>")] + "ж".encode()[:1], None, RU, "utf-8"),
    ],
)  # fmt: skip
def test_charsets(body: bytes, content_type: str | None, title: str, encoding: str) -> None:
    page = extract(body, URL, content_type=content_type)
    assert (page.title, page.encoding) == (title, encoding)


def test_header_charset_from_headers_mapping() -> None:
    body = doc(RU).encode("cp1251")
    page = extract(body, URL, headers={"content-TYPE": "text/html; charset=windows-1251"})
    assert page.title == RU
    # an explicit content_type wins over the headers mapping
    page = extract(body, URL, content_type="text/html; charset=koi8-r",
                   headers={"Content-Type": "text/html; charset=windows-1251"})  # fmt: skip
    assert page.encoding == "koi8-r"


def test_stray_byte_keeps_declared_utf8() -> None:
    body = doc(RU * 5).encode().replace(b"</p>", b"\xe9</p>")
    page = extract(body, URL, content_type="text/html; charset=utf-8")
    assert page.encoding == "utf-8" and page.title == RU * 5


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # paths are UTF-8 whatever the page's encoding (browsers do the same)
        ('<meta charset="iso-8859-1"><a href="/café">'.encode("latin-1"),
         "http://example.com/caf%C3%A9"),
        ('<meta charset="windows-1251"><a href="/путь">'.encode("cp1251"),
         "http://example.com/%D0%BF%D1%83%D1%82%D1%8C"),
        ('<meta charset="shift_jis"><a href="/日本">'.encode("shift_jis"),
         "http://example.com/%E6%97%A5%E6%9C%AC"),
        # ...but a query is encoded in the page's encoding
        ('<meta charset="windows-1251"><a href="/s?q=тест#ф">'.encode("cp1251"),
         "http://example.com/s?q=%F2%E5%F1%F2"),
        ('<meta charset="iso-8859-1"><a href="/s?q=café">'.encode("latin-1"),
         "http://example.com/s?q=caf%E9"),
        ('<meta charset="utf-8"><a href="/s?q=café">'.encode(), "http://example.com/s?q=caf%C3%A9"),
        # a character the page's encoding lacks is sent as a character reference
        (b'<meta charset="iso-8859-1"><a href="/s?q=&#1078;">',
         "http://example.com/s?q=%26%231078%3B"),
    ],
)  # fmt: skip
def test_links_on_legacy_pages(body: bytes, expected: str) -> None:
    assert extract(body, URL).links == [expected]


# --- is_html ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/html", b"", True),
        ("TEXT/HTML; charset=utf-8", b"%PDF-1.4", True),
        ("application/xhtml+xml", b"<?xml?>", True),
        ("text/plain", b"<html>", False),
        ("application/pdf", b"<html>", False),
        ("image/png", b"\x89PNG", False),
        ("application/json", b"{}", False),
        ("text/xml", b"<html>", False),
        (None, b"<!DOCTYPE html><html>", True),
        (None, b"  \n\t<!doctype HTML PUBLIC ...>", True),
        (None, b"<html lang=en>", True),
        (None, b"<HTML>", True),
        (None, b"<html\n  lang=en>", True),
        (None, b"<head>", True),
        (None, b"<body>", True),
        (None, b"<a href=x>", True),
        (None, b"<p>text", True),
        (None, b"<div class=x>", True),
        (None, b"<title>t", True),
        (None, b"<!-- comment -->", True),
        (None, b"<br>", True),
        (None, b"\xef\xbb\xbf<!doctype html>", True),
        (None, "\ufeff<html>".encode("utf-16-le"), True),
        (None, b"<htmlx>", False),
        (None, b"<pre>", False),
        (None, b"<?xml version='1.0'?><html>", False),
        (None, b"%PDF-1.7", False),
        (None, b"\x89PNG\r\n\x1a\n", False),
        (None, b"", False),
        (None, b"   ", False),
        (None, b"plain text <html>", False),
        ("", b"<html>", True),
        ("application/octet-stream", b"<html>", True),
        ("application/octet-stream", b"\x00\x01\x02", False),
        ("unknown/unknown", b"<body>", True),
        ("text/html;", b"", True),
        (";;", b"<p>x", True),
    ],
)
def test_is_html(content_type: str | None, body: bytes, expected: bool) -> None:
    assert is_html(content_type, body) is expected


# --- hostile input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n\t ",
        b"<!-- only a comment -->",
        b"<?xml version='1.0'?>",
        b"\x00",
        b"\x00" * 10_000,
        b"<title>a\x00b</title><a href='/x\x00y'>",
        bytes(range(256)) * 40,
        b"\xff\xfe\x00\x00garbage",
        b"\xfe\xff",
        b"<html><head><title>unterminated",
        b"<a href='/x",
        b'<a href="/x" <a href=>>><<</a',
        b"<div" * 10_000,
        b"</p>" * 10_000 + b"<a href=/ok>",
        b"<script>" + b"<a href=/no>" * 100,
        b"<![CDATA[ <a href=/x> ]]>",
        b"<table><tr><td><form><a href=/in-table></table>",
        b'<meta charset="utf-32"><title>t</title>',
        b'<meta charset="x-unknown"><title>t</title>',
        b"<svg><a xlink:href='/svg'/></svg><math><a href='/m'/></math>",
        b"<a href='" + b"\xe9" * 100_000 + b"'>",
        b"<html>" + b"<title>t</title>" * 1000,
        b"<a href='&#0;&#xD800;&#x110000;'>",
        b"<a href='%zz%'>",
    ],
)
def test_hostile_input_never_raises(body: bytes) -> None:
    with no_internal_error():
        page = extract(body, URL)
    check_invariants(page)


def test_empty_body() -> None:
    page = extract(b"", URL, headers={"X-Robots-Tag": "noindex"})
    assert page.title is None and page.links == [] and page.text_length == 0
    assert page.noindex and page.encoding == "utf-8"


def test_huge_attribute_value() -> None:
    body = b"<a href='/" + b"a" * 5_000_000 + b"'>x</a><a href='/ok'>ok</a>"
    page = extract(body, URL)
    assert page.links == ["http://example.com/ok"] and dropped(page) == {"too_long": 1}


def test_deeply_nested_divs() -> None:
    body = (
        b"<html><head><title>Deep</title></head><body><a href='/before'>b</a>"
        + b"<div>" * 10_000
        + b"<a href='/deep'>d</a>"
        + b"</div>" * 10_000
        + b"<a href='/after'>a</a><script>var hidden;</script></body></html>"
    )
    with no_internal_error():
        page = extract(body, URL)
    assert page.title == "Deep"
    assert page.links == [f"http://example.com/{p}" for p in ("before", "deep", "after")]
    assert page.text_length == len("bda")


@pytest.mark.parametrize("tag", [b"<noscript>", b"<template>", b"<table><tr><td>", b"<font>"])
def test_deep_nesting_of_any_tag(tag: bytes) -> None:
    body = b"<title>T</title><a href=/first>" + tag * 3000 + b"<a href=/last>"
    page = extract(body, URL)
    assert page.title == "T"
    assert page.links == ["http://example.com/first", "http://example.com/last"]


def test_unclosed_spans() -> None:
    body = b"<body>" + b"<span>x" * 5000 + b"<a href='/end' rel=nofollow>e</a><a href='/f'>"
    page = extract(body, URL)
    assert page.links == ["http://example.com/f"] and dropped(page) == {"nofollow": 1}


def test_100k_links_capped() -> None:
    # How long it takes is bench/parse.py's (a bound there, not here: a busy machine is slow).
    body = "".join(f'<a href="/p/{i}">link {i}</a>' for i in range(100_000)).encode()
    page = extract(body, URL, max_links=5000)
    assert page.links[:2] == ["http://example.com/p/0", "http://example.com/p/1"]
    assert len(page.links) == 5000 and page.links[-1] == "http://example.com/p/4999"
    assert dropped(page) == {"too_many": 95_000}


def test_duplicate_hrefs_resolved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import crawler_tasks.web.page as parse_module

    calls: list[str] = []
    real = parse_module.resolve

    def counting(base: str, href: str) -> str | None:
        calls.append(href)
        return real(base, href)

    monkeypatch.setattr(parse_module, "resolve", counting)
    parse_module._check_memo.cache_clear()
    page = parse('<a href="/a">' * 500 + '<a href="/b">' * 500)
    assert len(page.links) == 2 and sorted(calls) == ["/a", "/b"]
    # Root-relative navigation links on the next page of the site are not resolved again.
    again = parse('<a href="/b">b</a><a href="/a">a</a>')
    assert again.links == [page.links[1], page.links[0]] and len(calls) == 2


# --- property tests -----------------------------------------------------------------------------


@SETTINGS
@given(body=st.binary(max_size=4096), content_type=st.none() | st.text(max_size=40))
def test_never_raises_on_bytes(body: bytes, content_type: str | None) -> None:
    with no_internal_error():
        page = extract(body, URL, content_type=content_type)
    check_invariants(page)
    is_html(content_type, body)


_fragment = st.text(max_size=300)


@SETTINGS
@given(title=_fragment, href=_fragment, text=_fragment, charset=st.sampled_from(
    ["utf-8", "windows-1251", "iso-8859-1", "shift_jis", "utf-16", "bogus", ""]))  # fmt: skip
def test_never_raises_on_html_text(title: str, href: str, text: str, charset: str) -> None:
    html = (
        f'<html lang="{text[:5]}"><head><meta charset="{charset}"><title>{title}</title>'
        f'<base href="{href}"><link rel=canonical href="{href}"></head>'
        f'<body><p>{text}</p><a href="{href}">{text}</a><a href="/{href}?{text}">x</a></body>'
    )
    for encoding in ("utf-8", "cp1251", "utf-16"):
        body = html.encode(encoding, "replace")
        with no_internal_error():
            page = extract(body, URL, max_links=1, max_url_length=200)
        check_invariants(page, max_links=1, max_url_length=200)


_PIECES = [
    b"<a href=", b"<area href=", b"<base href=", b"<link rel=canonical href=", b" rel=nofollow",
    b'<meta name=robots content="', b'<meta charset="', b"<meta http-equiv=content-language ",
    b"<title>", b"</title>", b"<script>", b"</script>", b"<template>", b"<noscript>", b"<svg>",
    b"<html lang=", b"<!--", b"-->", b"<?xml version='1.0' encoding='utf-16'?>", b"<![CDATA[",
    b"'", b'"', b">", b"</", b"/", b"?", b"#", b"&", b"&#x", b";", b" ", b"\n", b"\x00", b"\xff",
    b"\xef\xbb\xbf", b"\xd0\xb6", b"\xe9", b"http:", b"https://h.example/", b"javascript:",
    b"mailto:", b"//", b"..", b"%", b"[", b"none", b"windows-1251", b"utf-8", b"<span>" * 700,
]  # fmt: skip


@SETTINGS
@given(
    pieces=st.lists(st.sampled_from(_PIECES) | st.binary(max_size=8), max_size=60),
    content_type=st.sampled_from([None, "text/html", "text/html; charset=utf-16",
                                  "text/html; charset=shift_jis", "text/html; charset=bogus"]),
    honour_nofollow=st.booleans(),
)  # fmt: skip
def test_never_raises_on_html_like_bytes(
    pieces: list[bytes], content_type: str | None, honour_nofollow: bool
) -> None:
    body = b"".join(pieces)
    with no_internal_error():
        page = extract(body, URL, content_type=content_type, honour_nofollow=honour_nofollow,
                       headers={"X-Robots-Tag": body[:30].decode("latin-1")})  # fmt: skip
    check_invariants(page)
