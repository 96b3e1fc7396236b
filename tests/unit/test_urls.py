"""Tests of ``crawler_tasks.web.urls``: normalisation tables, helpers, scope, and fuzzing."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_tasks.errors import ConfigError, InvalidSeed, InvalidURL
from crawler_tasks.web.scope import Scope
from crawler_tasks.web.urls import (
    NON_HTML_EXTENSIONS,
    domain_key,
    has_repeated_segments,
    host_of,
    looks_non_html,
    normalize,
    origin_of,
    resolve,
)

# --- normalize: accepted inputs ------------------------------------------------------------

RFC_3986_SECTION_6 = [
    ("HTTP://www.Example.com/", "http://www.example.com/"),
    ("http://example.com/%7Efoo", "http://example.com/~foo"),
    ("http://example.com/%7efoo", "http://example.com/~foo"),
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com:80/", "http://example.com/"),
    ("http://example.com:/", "http://example.com/"),
    ("http://example.com", "http://example.com/"),
    ("http://example.com/%3a", "http://example.com/%3A"),
    ("http://example.com/a%c2%b1b", "http://example.com/a%C2%B1b"),
    ("http://example.com/?", "http://example.com/"),
    ("http://example.com/data", "http://example.com/data"),
]

# RFC 3986 5.4 reference resolution results, used here as remove_dot_segments cases.
DOT_SEGMENTS = [
    ("http://a/b/c/./../../g", "http://a/g"),
    ("http://a/b/c/g/.", "http://a/b/c/g/"),
    ("http://a/b/c/g/..", "http://a/b/c/"),
    ("http://a/./g", "http://a/g"),
    ("http://a/../g", "http://a/g"),
    ("http://a/../../../g", "http://a/g"),
    ("http://a/g.", "http://a/g."),
    ("http://a/.g", "http://a/.g"),
    ("http://a/g..", "http://a/g.."),
    ("http://a/..g", "http://a/..g"),
    ("http://a/b/c/./../g;x=1/./y", "http://a/b/g;x=1/y"),
    ("http://a/b/c/%2E%2E/g", "http://a/b/g"),
    ("http://a/b/c/%2e/g", "http://a/b/c/g"),
    ("http://a/b//../c", "http://a/b/c"),
    ("http://a/..", "http://a/"),
    ("http://a/.", "http://a/"),
]

HOSTS = [
    ("http://bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://b%C3%BCcher.example/", "http://xn--bcher-kva.example/"),
    ("http://ex%61mple.com/", "http://example.com/"),
    ("http://ｅｘａｍｐｌｅ．ｃｏｍ/", "http://example.com/"),
    ("http://i❤.ws/", "http://xn--i-7iq.ws/"),
    ("http://example.com./", "http://example.com/"),
    ("http://my_host.example.com/", "http://my_host.example.com/"),
    ("http://127.0.0.1/", "http://127.0.0.1/"),
    ("http://[2001:DB8::0001]/", "http://[2001:db8::1]/"),
    ("http://[2001:db8:0:0:0:0:0:1]:8080/x", "http://[2001:db8::1]:8080/x"),
    ("http://[::FFFF:1.2.3.4]/", "http://[::ffff:1.2.3.4]/"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("http://user:pw@example.com/", "http://example.com/"),
    ("http://a@b@example.com/", "http://example.com/"),
]

PORTS_SCHEMES_FRAGMENTS = [
    ("https://example.com:443/", "https://example.com/"),
    ("https://example.com:80/", "https://example.com:80/"),
    ("http://example.com:443/", "http://example.com:443/"),
    ("http://example.com:8080/", "http://example.com:8080/"),
    ("http://example.com:0080/", "http://example.com/"),
    ("http://example.com:08080", "http://example.com:8080/"),
    ("http://example.com:65535/", "http://example.com:65535/"),
    ("HtTpS://example.com", "https://example.com/"),
    ("http://example.com/a#frag", "http://example.com/a"),
    ("http://example.com/a?b=1#frag?c=2", "http://example.com/a?b=1"),
    ("http://example.com#x/y", "http://example.com/"),
    ("http://example.com?x=/y", "http://example.com/?x=/y"),
    ("  http://example.com/a \n", "http://example.com/a"),
    ("\x00\x1fhttp://example.com/\t", "http://example.com/"),
    ("http://exa\nmple.com/a\tb\r", "http://example.com/ab"),
]

PERCENT_ENCODING = [
    ("http://example.com/a%2Fb", "http://example.com/a%2Fb"),
    ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
    ("http://example.com/a%3Ab", "http://example.com/a%3Ab"),
    ("http://example.com/%41%5a%30%2D%2E%5F%7E", "http://example.com/AZ0-._~"),
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/é", "http://example.com/%C3%A9"),
    ("http://example.com/%C3%A9", "http://example.com/%C3%A9"),
    ('http://example.com/"<>\\^`{|}', "http://example.com/%22%3C%3E%5C%5E%60%7B%7C%7D"),
    ("http://example.com/[x]", "http://example.com/%5Bx%5D"),
    ("http://example.com/%", "http://example.com/%25"),
    ("http://example.com/%g1", "http://example.com/%25g1"),
    ("http://example.com/%4", "http://example.com/%254"),
    ("http://example.com/100%", "http://example.com/100%25"),
    ("http://example.com/%25", "http://example.com/%25"),
    ("http://example.com/!$&'()*+,;=:@", "http://example.com/!$&'()*+,;=:@"),
    ("http://example.com/\x7f\x01x", "http://example.com/%7F%01x"),
    ("http://example.com/😀", "http://example.com/%F0%9F%98%80"),
]

QUERIES = [
    ("http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2"),
    ("http://example.com/?a=2&a=1", "http://example.com/?a=1&a=2"),
    ("http://example.com/?a=1&a=1", "http://example.com/?a=1&a=1"),
    ("http://example.com/?q=a+b", "http://example.com/?q=a+b"),
    ("http://example.com/?q=a%2Bb", "http://example.com/?q=a%2Bb"),
    ("http://example.com/?q=a%2bb&x=%26%3d", "http://example.com/?q=a%2Bb&x=%26%3D"),
    ("http://example.com/?q=a b", "http://example.com/?q=a%20b"),
    ("http://example.com/?q=%7E%41", "http://example.com/?q=~A"),
    ("http://example.com/?a", "http://example.com/?a"),
    ("http://example.com/?a=", "http://example.com/?a="),
    ("http://example.com/?a=&a", "http://example.com/?a&a="),
    ("http://example.com/?b&&a", "http://example.com/?a&b"),
    ("http://example.com/?&", "http://example.com/"),
    ("http://example.com/?x=a/b?c:d@e", "http://example.com/?x=a/b?c:d@e"),
    ("http://example.com/?Q=1&q=1", "http://example.com/?Q=1&q=1"),
    ("http://example.com/?a[]=1", "http://example.com/?a%5B%5D=1"),
    ("http://example.com?b=1", "http://example.com/?b=1"),
]

NOT_PROTOCOL_BASED = [
    ("http://example.com/Path/To", "http://example.com/Path/To"),
    ("http://example.com/dir/", "http://example.com/dir/"),
    ("http://example.com/dir", "http://example.com/dir"),
    ("http://example.com/index.html", "http://example.com/index.html"),
    ("http://www.example.com/", "http://www.example.com/"),
    ("http://example.com//a//", "http://example.com//a//"),
    ("http://example.com/a/b;p=1", "http://example.com/a/b;p=1"),
]

ALL_ACCEPTED = (
    RFC_3986_SECTION_6
    + DOT_SEGMENTS
    + HOSTS
    + PORTS_SCHEMES_FRAGMENTS
    + PERCENT_ENCODING
    + QUERIES
    + NOT_PROTOCOL_BASED
)


@pytest.mark.parametrize(("url", "expected"), ALL_ACCEPTED)
def test_normalize(url: str, expected: str) -> None:
    assert normalize(url) == expected


@pytest.mark.parametrize(("url", "expected"), ALL_ACCEPTED)
def test_normalize_is_idempotent_on_tables(url: str, expected: str) -> None:
    assert normalize(expected) == expected


# --- normalize: rejected inputs ------------------------------------------------------------

REJECTED = [
    "",
    "   ",
    "/relative/path",
    "relative",
    "//example.com/protocol-relative",
    "?q=1",
    "#top",
    "mailto:someone@example.com",
    "javascript:alert(1)",
    "data:text/html,<p>hi</p>",
    "ftp://example.com/file",
    "file:///etc/passwd",
    "ws://example.com/",
    "http:example.com",
    "http:/example.com",
    "http://",
    "http:///path",
    "http://:80/",
    "http://user@/",
    "http://example.com:abc/",
    "http://example.com:-1/",
    "http://example.com:0/",
    "http://example.com:65536/",
    "http://example.com:99999999999999999999/",
    "http://example.com:８０/",
    "http://example.com:80:80/",
    "http://exa mple.com/",
    "http://exa<mple.com/",
    "http://example.com\\path",
    "http://a..b.com/",
    "http://.example.com/",
    "http://example.com../",
    "http://" + "a" * 64 + ".com/",
    "http://" + "a." * 127 + "com/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://127.1/",
    "http://010.0.0.1/",
    "http://256.0.0.1/",
    "http://1.2.3.4.5/",
    "http://[::1/",
    "http://[::1]x/",
    "http://[not-ipv6]/",
    "http://[fe80::1%25eth0]/",
    "http://[v1.fe]/",
    "http://::1/",
    "http://%zz.com/",
    "http://%C3.com/",
    "http://ex%2Fample.com/",
    "http://\ud800.com/",
    "http://example.com/\ud800",
    "http://example.com/?q=\udfff",
]


@pytest.mark.parametrize("url", REJECTED)
def test_normalize_rejects(url: str) -> None:
    with pytest.raises(InvalidURL) as info:
        normalize(url)
    assert repr(url) in str(info.value)
    assert info.value.reason == "invalid_url"


def test_rejection_message_masks_credentials() -> None:
    with pytest.raises(InvalidURL) as info:
        normalize("http://user:secret@bad host/")
    assert "secret" not in str(info.value)
    assert "user:***@bad host" in str(info.value)


def test_invalid_url_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        normalize("mailto:x@example.com")


# --- resolve -------------------------------------------------------------------------------

BASE = "http://example.com/a/b/c?q=1#frag"
RESOLVE = [
    ("d", "http://example.com/a/b/d"),
    ("./d", "http://example.com/a/b/d"),
    ("../d", "http://example.com/a/d"),
    ("../../../../d", "http://example.com/d"),
    ("/x/y", "http://example.com/x/y"),
    ("?z=2", "http://example.com/a/b/c?z=2"),
    ("#top", "http://example.com/a/b/c?q=1"),
    ("", "http://example.com/a/b/c?q=1"),
    ("//other.example/x", "http://other.example/x"),
    ("https://Other.example:443/x", "https://other.example/x"),
    ("  /spaced \n", "http://example.com/spaced"),
    ("/multi\nline", "http://example.com/multiline"),
    ("d e", "http://example.com/a/b/d%20e"),
    ("javascript:void(0)", None),
    ("JavaScript:alert(1)", None),
    ("mailto:x@example.com", None),
    ("tel:+123", None),
    ("data:text/plain,hi", None),
    ("ftp://example.com/", None),
    ("http://[::1/", None),
    ("http://bad host/", None),
]


@pytest.mark.parametrize(("href", "expected"), RESOLVE)
def test_resolve(href: str, expected: str | None) -> None:
    assert resolve(BASE, href) == expected


def test_resolve_against_bare_host_base() -> None:
    assert resolve("http://example.com", "x") == "http://example.com/x"


def test_resolve_with_non_http_base() -> None:
    assert resolve("mailto:x@example.com", "page") is None
    assert resolve("mailto:x@example.com", "http://example.com/") == "http://example.com/"


# --- host_of / origin_of / domain_key ------------------------------------------------------

ORIGINS = [
    ("http://example.com/a?b", "example.com", "http://example.com"),
    ("https://example.com:8443/", "example.com", "https://example.com:8443"),
    ("http://[2001:db8::1]:8080/x", "2001:db8::1", "http://[2001:db8::1]:8080"),
    ("http://127.0.0.1/", "127.0.0.1", "http://127.0.0.1"),
    ("http://xn--bcher-kva.example/", "xn--bcher-kva.example", "http://xn--bcher-kva.example"),
]


@pytest.mark.parametrize(("url", "host", "origin"), ORIGINS)
def test_host_and_origin(url: str, host: str, origin: str) -> None:
    assert host_of(url) == host
    assert origin_of(url) == origin


DOMAIN_KEYS = [
    ("http://a.b.example.co.uk/", "a.b.example.co.uk", "example.co.uk"),
    ("http://www.example.com/x", "www.example.com", "example.com"),
    ("http://example.com/", "example.com", "example.com"),
    ("http://foo.github.io/", "foo.github.io", "github.io"),
    ("http://sub.xn--bcher-kva.de/", "sub.xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("http://127.0.0.1:8080/", "127.0.0.1", "127.0.0.1"),
    ("http://[::1]/", "::1", "::1"),
    ("http://localhost/", "localhost", "localhost"),
    ("http://intranet.corp/", "intranet.corp", "intranet.corp"),
]


@pytest.mark.parametrize(("url", "host", "registered"), DOMAIN_KEYS)
def test_domain_key(url: str, host: str, registered: str) -> None:
    assert domain_key(url, "host") == host
    assert domain_key(url, "registered_domain") == registered


def test_domain_key_unknown_mode() -> None:
    with pytest.raises(ConfigError):
        domain_key("http://example.com/", "origin")


# --- has_repeated_segments / looks_non_html ------------------------------------------------

REPEATS = [
    ("http://e.com/a/b/a/b/a/b", 3, True),
    ("http://e.com/a/b/a/b", 3, False),
    ("http://e.com/x/x/x/x", 3, True),
    ("http://e.com/x/x/x/x", 5, False),
    ("http://e.com/x/y/x/z/x", 3, True),
    ("http://e.com//////", 2, False),
    ("http://e.com/", 1, False),
    ("http://e.com/a", 1, True),
    ("http://e.com/a/a/a?x=a/a/a", 4, False),
    ("http://e.com/a/a/a", 0, False),
]


@pytest.mark.parametrize(("url", "limit", "expected"), REPEATS)
def test_has_repeated_segments(url: str, limit: int, expected: bool) -> None:
    assert has_repeated_segments(url, limit) is expected


NON_HTML = [
    ("http://e.com/a.pdf", True),
    ("http://e.com/A.JPG", True),
    ("http://e.com/archive.tar.gz", True),
    ("http://e.com/style.css?v=3", True),
    ("http://e.com/file.zip;jsessionid=1", True),
    ("http://e.com/page.html", False),
    ("http://e.com/page.php", False),
    ("http://e.com/sitemap.xml", False),
    ("http://e.com/dir.pdf/", False),
    ("http://e.com/", False),
    ("http://e.com/.css", False),
    ("http://e.com/x?file=a.pdf", False),
    ("http://e.com/pdf", False),
]


@pytest.mark.parametrize(("url", "expected"), NON_HTML)
def test_looks_non_html(url: str, expected: bool) -> None:
    assert looks_non_html(url) is expected


def test_non_html_extensions_are_lower_case_without_dot() -> None:
    assert all(ext == ext.lower() and "." not in ext for ext in NON_HTML_EXTENSIONS)
    assert {"pdf", "jpg", "png", "zip", "mp4", "css", "js", "woff2", "docx"} <= NON_HTML_EXTENSIONS


# --- Scope ---------------------------------------------------------------------------------

SCOPE = Scope(
    allowed_domains=("Example.com", "bücher.example", ".other.org"),
    include=(r"^https?://[^/]+/(docs|blog|$)",),
    exclude=(r"/private/", r"\?.*sessionid="),
    max_url_length=60,
    max_repeated_segments=3,
)
SCOPE_CASES = [
    ("http://example.com/", None),
    ("http://example.com/docs/a", None),
    ("https://www.example.com/blog/x", None),
    ("http://a.b.example.com/docs", None),
    ("http://xn--bcher-kva.example/docs", None),
    ("http://other.org/docs", None),
    ("http://notexample.com/docs", "out_of_domain"),
    ("http://example.com.evil.net/docs", "out_of_domain"),
    ("http://example.org/docs", "out_of_domain"),
    ("http://com/docs", "out_of_domain"),
    ("http://example.com/docs/private/x", "excluded"),
    ("http://example.com/docs?sessionid=1", "excluded"),
    ("http://example.com/shop", "not_included"),
    ("http://example.com/docs/" + "x" * 60, "url_too_long"),
    ("http://example.com/docs/a/b/a/b/a", "trap"),
]


@pytest.mark.parametrize(("url", "reason"), SCOPE_CASES)
def test_scope_check(url: str, reason: str | None) -> None:
    assert SCOPE.check(url) == reason


def test_scope_stores_normalised_domains_and_tuples() -> None:
    assert SCOPE.allowed_domains == ("example.com", "xn--bcher-kva.example", "other.org")
    scope = Scope(allowed_domains=["A.com", "a.com."], include=["x"])  # type: ignore[arg-type]
    assert scope == Scope(allowed_domains=("a.com",), include=("x",))
    assert scope.allowed_domains == ("a.com",) and scope.include == ("x",)


def test_scope_survives_pickle() -> None:
    clone = pickle.loads(pickle.dumps(SCOPE))
    assert clone == SCOPE
    assert [clone.check(url) for url, _ in SCOPE_CASES] == [r for _, r in SCOPE_CASES]


def test_scope_without_patterns_or_domains() -> None:
    scope = Scope(allowed_domains=())
    assert scope.check("http://anything.example/x") is None
    assert scope.check("http://e.com/a/a/a") == "trap"


def test_scope_for_seeds_defaults_to_seed_hosts() -> None:
    scope = Scope.for_seeds(
        ["HTTP://Example.com/start", "http://docs.example.org/", "http://example.com/b"]
    )
    assert scope.allowed_domains == ("example.com", "docs.example.org")
    assert scope.check("http://sub.example.com/x") is None
    assert scope.check("http://example.org/") == "out_of_domain"


def test_scope_for_seeds_takes_ipv6_literals() -> None:
    """An IPv6 seed's host comes without brackets (host_of): it is an allowed domain as it is,
    and so is the address given with or without brackets, in any of its spellings (issue 50:
    `http://[::1]:8472/` failed with "invalid allowed domain '::1'")."""
    scope = Scope.for_seeds(["http://[::1]:8472/", "http://[::FFFF:1.2.3.4]/"])
    assert scope.allowed_domains == ("::1", "::ffff:1.2.3.4")
    assert scope.check("http://[::1]:8472/a") is None
    assert scope.check("http://[::ffff:1.2.3.4]/") is None
    given = Scope(allowed_domains=("[0:0::1]", "::ffff:102:304"))
    assert given.allowed_domains == ("::1", "::ffff:1.2.3.4")


def test_scope_for_seeds_explicit_arguments() -> None:
    scope = Scope.for_seeds(
        ["http://example.com/"],
        allowed_domains=["example.net"],
        include=[r"/a"],
        exclude=[r"/a/b"],
        max_url_length=100,
        max_repeated_segments=2,
    )
    assert scope.check("http://example.com/a") == "out_of_domain"
    assert scope.check("http://example.net/a") is None
    assert scope.check("http://example.net/a/b") == "excluded"
    assert scope.check("http://example.net/c") == "not_included"
    assert scope.check("http://example.net/a/x/x") == "trap"
    assert scope.include == ("/a",)


def test_scope_for_seeds_rejects_bad_seed() -> None:
    with pytest.raises(InvalidSeed) as info:
        Scope.for_seeds(["http://example.com/", "mailto:x@example.com"])
    assert info.value.seed == "mailto:x@example.com"


def test_scope_for_seeds_needs_seeds_or_domains() -> None:
    with pytest.raises(ConfigError):
        Scope.for_seeds([])
    assert Scope.for_seeds([], allowed_domains=["example.com"]).allowed_domains == ("example.com",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allowed_domains": ("bad host",)},
        {"allowed_domains": ("example.com:80",)},
        {"allowed_domains": ("ok.com",), "include": ("(",)},
        {"allowed_domains": ("ok.com",), "exclude": ("[",)},
    ],
)
def test_scope_rejects_bad_configuration(kwargs: dict[str, tuple[str, ...]]) -> None:
    with pytest.raises(ConfigError):
        Scope(**kwargs)  # type: ignore[arg-type]


def test_scope_is_frozen_and_comparable() -> None:
    a = Scope(allowed_domains=("example.com",), include=("x",))
    b = Scope(allowed_domains=("example.com",), include=("x",))
    assert a == b
    assert hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.max_url_length = 1  # type: ignore[misc]


def test_scope_accepts_ipv6_domain() -> None:
    scope = Scope(allowed_domains=("[2001:DB8::1]",))
    assert scope.check("http://[2001:db8::1]/") is None
    assert scope.check("http://[2001:db8::2]/") == "out_of_domain"


# --- property-based ------------------------------------------------------------------------

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

URL_CHARS = st.sampled_from(
    list("aZ09-._~!$&'()*+,;=:@/?#[]% \t\n\"<>\\^`{|}\x00\x7féü😀\ud800") + ["%2F", "%7e", "%zz"]
)
url_text = st.lists(URL_CHARS, max_size=20).map("".join)
hosts = st.one_of(
    st.from_regex(r"\A[a-zA-Z0-9_-]{1,10}(\.[a-zA-Z0-9_-]{1,10}){0,3}\.?\Z"),
    st.sampled_from(
        ["bücher.example", "[::1]", "[2001:DB8::1]", "127.0.0.1", "ｅｘ．com", "%41.com"]
    ),
    url_text,
)
url_like = st.builds(
    lambda scheme, userinfo, host, port, path, query, fragment: (
        f"{scheme}://{userinfo}{host}{port}{path}{query}{fragment}"
    ),
    st.sampled_from(["http", "https", "HTTP", "hTTps", "ftp", "javascript", ""]),
    st.sampled_from(["", "user@", "u:p@", "@"]),
    hosts,
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":0", ":99999", ":x"]),
    url_text.map(lambda p: "/" + p),
    url_text.map(lambda q: "?" + q) | st.just(""),
    url_text.map(lambda f: "#" + f) | st.just(""),
)
regex_urls = st.from_regex(
    r"\A\s*[hH][tT][tT][pP][sS]?://([a-z]+@)?[a-zA-Z0-9.\-\[\]:%]{1,20}(:[0-9]{0,6})?"
    r"(/[a-zA-Z0-9%._~!$&'()*+,;=:@ \-]*)*(\?[a-zA-Z0-9%&=+.\-]*)?(#.*)?\s*\Z"
)
any_input = st.one_of(st.text(), url_text, url_like, regex_urls)


def _check_normalize(url: str) -> None:
    try:
        once = normalize(url)
    except InvalidURL:
        return
    assert normalize(once) == once
    assert once.startswith(("http://", "https://"))
    assert once.isascii() and " " not in once and "#" not in once


@FUZZ
@given(any_input)
def test_normalize_fuzz_raises_only_invalid_url_and_is_idempotent(url: str) -> None:
    _check_normalize(url)


@FUZZ
@given(url_like)
def test_normalize_fuzz_url_like(url: str) -> None:
    _check_normalize(url)


@FUZZ
@given(st.sampled_from(["http://example.com/a/b?q=1", "mailto:x", "", "http://[::1"]), any_input)
def test_resolve_fuzz_never_raises(base: str, href: str) -> None:
    result = resolve(base, href)
    assert result is None or normalize(result) == result


@FUZZ
@given(regex_urls)
def test_helpers_on_normalized_urls(url: str) -> None:
    try:
        url = normalize(url)
    except InvalidURL:
        return
    assert origin_of(url) + url[len(origin_of(url)) :] == url
    assert host_of(url) in origin_of(url)
    assert domain_key(url, "registered_domain")
    assert isinstance(has_repeated_segments(url, 3), bool)
    assert isinstance(looks_non_html(url), bool)
    assert SCOPE.check(url) in {
        None,
        "out_of_domain",
        "excluded",
        "not_included",
        "url_too_long",
        "trap",
    }
