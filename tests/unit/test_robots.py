"""Tests of ``crawler_tasks.web.robots``: Google's conformance cases, RFC 9309 tables, and the cache
against a throwaway ``redis-server``."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_tasks.web.robots import (
    MAX_ROBOTS_BYTES,
    Robots,
    crawl_delay,
    is_allowed,
    policy_for_response,
    product_token,
    sitemaps,
)
from tests.support.paths import DATA

UA = "crawler-tasks/0.1 (+https://github.com/crawler-tasks/crawler-tasks)"

# --- Google's robots_test.cc -----------------------------------------------------------------

GOOGLE_CASES_FILE = DATA / "google-robotstxt-cases.json"

#: Google extensions we deliberately don't follow, by case id (name-index within that name).
GOOGLE_ONLY_UNSUPPORTED = {
    "GoogleOnly_AcceptUserAgentUpToFirstSpace-1": (
        "Google wants the caller to pass a bare product token and compares 'Foo Bar' whole; "
        "we reduce the caller's user agent to its product token too, so 'Foo Bar' is 'foo'"
    ),
}


def _google_cases() -> list[Any]:
    cases = json.loads(GOOGLE_CASES_FILE.read_text(encoding="utf-8"))
    seen: Counter[str] = Counter()
    params = []
    for case in cases:
        case_id = f"{case['name']}-{seen[case['name']]}"
        seen[case["name"]] += 1
        marks = []
        if case_id in GOOGLE_ONLY_UNSUPPORTED:
            marks = [pytest.mark.xfail(strict=True, reason=GOOGLE_ONLY_UNSUPPORTED[case_id])]
        params.append(pytest.param(case, id=case_id, marks=marks))
    return params


GOOGLE_CASES = _google_cases()


@pytest.mark.parametrize("case", GOOGLE_CASES)
def test_google_conformance(case: dict[str, Any]) -> None:
    assert is_allowed(case["robots"], case["agent"], case["url"]) is case["allowed"]


def test_google_case_inventory() -> None:
    ids = [p.id for p in GOOGLE_CASES]
    assert len(ids) == 145
    assert sum(i.startswith("ID_") for i in ids) == 72  # RFC 9309: none may be xfailed
    assert sum(i.startswith("GoogleOnly_") for i in ids) == 73
    assert set(GOOGLE_ONLY_UNSUPPORTED) <= {i for i in ids if i.startswith("GoogleOnly_")}


# --- RFC 9309 rules ------------------------------------------------------------------------------

RFC_9309 = [
    # (id, robots.txt, user agent, URL, allowed)
    ("empty-file", "", UA, "http://a/x", True),
    (
        "longest-match-disallow",
        "User-agent: *\nAllow: /a\nDisallow: /a/b",
        UA,
        "http://a/a/b/c",
        False,
    ),
    ("longest-match-allow", "User-agent: *\nDisallow: /a\nAllow: /a/b", UA, "http://a/a/b/c", True),
    ("shorter-match-loses", "User-agent: *\nAllow: /a\nDisallow: /a/b", UA, "http://a/a/c", True),
    ("tie-allow-wins", "User-agent: *\nDisallow: /a\nAllow: /a", UA, "http://a/a", True),
    (
        "tie-wildcard-allow-wins",
        "User-agent: *\nDisallow: /ab\nAllow: /a*",
        UA,
        "http://a/abc",
        True,
    ),
    ("empty-disallow", "User-agent: *\nDisallow:", UA, "http://a/x", True),
    ("case-sensitive-path", "User-agent: *\nDisallow: /Private", UA, "http://a/private", True),
    ("dollar-end", "User-agent: *\nDisallow: /*.pdf$", UA, "http://a/d/x.pdf", False),
    ("dollar-query", "User-agent: *\nDisallow: /*.pdf$", UA, "http://a/x.pdf?dl=1", True),
    ("dollar-longer", "User-agent: *\nDisallow: /*.pdf$", UA, "http://a/x.pdfx", True),
    ("dollar-inside-literal", "User-agent: *\nDisallow: /a$b", UA, "http://a/a$b", False),
    ("dollar-inside-no-anchor", "User-agent: *\nDisallow: /a$b", UA, "http://a/a", True),
    ("dollar-root-only", "User-agent: *\nDisallow: /\nAllow: /$", UA, "http://a/", True),
    (
        "dollar-root-only-not-below",
        "User-agent: *\nDisallow: /\nAllow: /$",
        UA,
        "http://a/x",
        False,
    ),
    ("star-middle", "User-agent: *\nDisallow: /*/private/", UA, "http://a/x/private/y", False),
    ("star-needs-segment", "User-agent: *\nDisallow: /*/private/", UA, "http://a/private/y", True),
    ("star-query", "User-agent: *\nDisallow: /*?", UA, "http://a/s?q=1", False),
    ("star-query-none", "User-agent: *\nDisallow: /*?", UA, "http://a/s", True),
    ("stars-repeated", "User-agent: *\nDisallow: /**x**$", UA, "http://a/ax", False),
    # protego alone measures "/page?" as "/page%3F" and lets it outrank the longer rule.
    (
        "query-rule-length",
        "User-agent: *\nAllow: /page?\nDisallow: /page*q",
        UA,
        "http://a/page?q",
        False,
    ),
    ("fragment-ignored", "User-agent: *\nDisallow: /a$", UA, "http://a/a#top", False),
    ("escape-hex-case", "User-agent: *\nDisallow: /caf%c3%a9", UA, "http://a/caf%C3%A9", False),
    ("non-ascii-rule", "User-agent: *\nDisallow: /café", UA, "http://a/caf%C3%A9", False),
    ("escaped-slash-not-slash", "User-agent: *\nDisallow: /a%2Fb", UA, "http://a/a/b", True),
    ("escaped-slash", "User-agent: *\nDisallow: /a%2Fb", UA, "http://a/a%2Fb", False),
    ("robots-txt-implicit", "User-agent: *\nDisallow: /", UA, "http://a/robots.txt", True),
    # group selection
    ("global-group", "User-agent: *\nDisallow: /", UA, "http://a/x", False),
    ("no-group-matches", "User-agent: other\nDisallow: /", UA, "http://a/x", True),
    (
        "specific-over-global",
        "User-agent: *\nDisallow: /\n\nUser-agent: crawler-tasks\nDisallow: /private",
        UA,
        "http://a/x",
        True,
    ),
    (
        "specific-empty-group",
        "User-agent: *\nDisallow: /\nUser-agent: crawler-tasks\n",
        UA,
        "http://a/x",
        True,
    ),
    (
        "groups-merged",
        "User-agent: crawler-tasks\nDisallow: /x\nUser-agent: b\nDisallow: /y\n"
        "User-agent: crawler-tasks\nDisallow: /z",
        UA,
        "http://a/z",
        False,
    ),
    (
        "groups-merged-not-others",
        "User-agent: crawler-tasks\nDisallow: /x\nUser-agent: b\nDisallow: /y\n"
        "User-agent: crawler-tasks\nDisallow: /z",
        UA,
        "http://a/y",
        True,
    ),
    (
        "agents-share-group",
        "User-agent: b\nUser-agent: crawler-tasks\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    (
        "new-group-after-rule",
        "User-agent: crawler-tasks\nDisallow: /x\nUser-agent: b\nDisallow: /",
        UA,
        "http://a/",
        True,
    ),
    ("rule-before-any-agent", "Disallow: /\nUser-agent: b\nDisallow: /x", UA, "http://a/", True),
    # user-agent matching
    ("agent-case-insensitive", "User-agent: CRAWLER-Tasks\nDisallow: /", UA, "http://a/", False),
    (
        "agent-up-to-space",
        "User-agent: crawler-tasks extra words\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    ("agent-version", "User-agent: crawler-tasks/2.0\nDisallow: /", UA, "http://a/", False),
    ("agent-prefix-no-match", "User-agent: crawler\nDisallow: /", UA, "http://a/", True),
    ("agent-longer-no-match", "User-agent: crawler-tasks-beta\nDisallow: /", UA, "http://a/", True),
    ("agent-star-with-words", "User-agent: * everyone\nDisallow: /", UA, "http://a/", False),
    (
        "agent-one-letter",
        "User-agent: *\nDisallow: /\nUser-agent: a\nAllow: /",
        "a",
        "http://a/x",
        True,
    ),
    (
        "agent-caller-full-ua",
        "User-agent: Mozilla\nDisallow: /",
        "Mozilla/5.0 (X11)",
        "http://a/",
        False,
    ),
    # other lines do not split or end a group (RFC 9309 2.2.4)
    (
        "unknown-line-among-agents",
        "User-agent: crawler-tasks\nFoo: bar\nUser-agent: *\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    (
        "sitemap-among-agents",
        "User-agent: crawler-tasks\nSitemap: http://a/s.xml\nUser-agent: *\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    (
        "crawl-delay-among-agents",
        "User-agent: crawler-tasks\nCrawl-delay: 5\nUser-agent: *\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    (
        "crawl-delay-and-blank-line-end-no-group",
        "User-agent: crawler-tasks\nCrawl-delay: 5\n\nUser-agent: *\nDisallow: /",
        UA,
        "http://a/",
        False,
    ),
    (
        "unknown-line-inside-group",
        "User-agent: crawler-tasks\nDisallow: /x\nFoo: bar\nDisallow: /y",
        UA,
        "http://a/y",
        False,
    ),
    # line syntax
    ("comments", "User-agent: * # all\n# Disallow: /\nDisallow: /x # no x", UA, "http://a/y", True),
    ("cr-line-ends", "User-agent: *\rDisallow: /x\r", UA, "http://a/x", False),
    ("crlf-line-ends", "User-agent: *\r\nDisallow: /x\r\n", UA, "http://a/x", False),
    ("bom", "\ufeffUser-agent: *\nDisallow: /x", UA, "http://a/x", False),
    ("missing-colon", "User-agent *\nDisallow /x", UA, "http://a/x", False),
    ("key-case", "USER-AGENT: *\nDISALLOW: /x", UA, "http://a/x", False),
]


@pytest.mark.parametrize(
    ("robots_txt", "agent", "url", "allowed"),
    [pytest.param(*case[1:], id=case[0]) for case in RFC_9309],
)
def test_rfc9309(robots_txt: str, agent: str, url: str, allowed: bool) -> None:
    assert is_allowed(robots_txt, agent, url) is allowed


@pytest.mark.parametrize(
    ("user_agent", "token"),
    [
        (UA, "crawler-tasks"),
        ("Googlebot", "googlebot"),
        ("foo_bar-baz/1", "foo_bar-baz"),
        ("  FooBot", "foobot"),
        ("", ""),
        ("1bot", ""),
    ],
)
def test_product_token(user_agent: str, token: str) -> None:
    assert product_token(user_agent) == token


# --- status codes (RFC 9309 2.3.1) -----------------------------------------------------------

STATUS = [
    # (status, body, kind, allowed /x)
    (200, b"User-agent: *\nDisallow: /x", "parsed", False),
    (200, b"User-agent: *\nDisallow: /y", "parsed", True),
    (204, b"", "parsed", True),
    (200, b"User-agent: *\n\xff\xfe junk\nDisallow: /x", "parsed", False),
    (301, b"", "allow", True),  # a redirect without Location: unavailable
    (400, b"", "allow", True),
    (401, b"User-agent: *\nDisallow: /", "allow", True),
    (403, b"User-agent: *\nDisallow: /", "allow", True),
    (404, b"", "allow", True),
    (410, b"", "allow", True),
    (408, b"", "disallow", False),
    (429, b"", "disallow", False),
    (500, b"User-agent: *\nAllow: /", "disallow", False),
    (503, b"", "disallow", False),
    (599, b"", "disallow", False),
    (None, b"", "disallow", False),
    (100, b"", "disallow", False),
]


@pytest.mark.parametrize(("status", "body", "kind", "allowed"), STATUS)
def test_policy_for_response(status: int | None, body: bytes, kind: str, allowed: bool) -> None:
    robots = policy_for_response(status, body)
    assert robots.kind == kind
    assert robots.allowed(UA, "http://a/x") is allowed
    assert robots.allowed(UA, "http://a/robots.txt")


# --- the 500 KiB limit ---------------------------------------------------------------------------


def _padded(rule_at: int, rule: str = "Disallow: /late") -> str:
    """A robots.txt whose line ``rule`` starts at byte ``rule_at``."""
    head = "User-agent: *\nDisallow: /early\n"
    filler = ("# " + "x" * 97 + "\n") * ((rule_at - len(head)) // 100)
    filler += "#" * (rule_at - len(head) - len(filler) - 1) + "\n"
    text = head + filler + rule + "\n"
    assert len(text.encode()) - len(rule) - 1 == rule_at
    return text


@pytest.mark.parametrize(
    ("rule_at", "honoured"),
    [
        (MAX_ROBOTS_BYTES - 100, True),  # well inside
        (MAX_ROBOTS_BYTES - len("Disallow: /late\n"), True),  # newline is the last byte kept
        (MAX_ROBOTS_BYTES - len("Disallow: /late"), True),  # newline is the first byte cut
        (MAX_ROBOTS_BYTES - 5, False),  # straddles the limit: dropped, not cut to "Disallow: /"
        (MAX_ROBOTS_BYTES, False),
        (MAX_ROBOTS_BYTES + 10_000, False),
    ],
)
def test_500_kib_limit(rule_at: int, honoured: bool) -> None:
    text = _padded(rule_at)
    for robots in (Robots.parse(text), policy_for_response(200, text.encode())):
        assert len(robots.text.encode()) <= MAX_ROBOTS_BYTES
        assert robots.allowed(UA, "http://a/early") is False
        assert robots.allowed(UA, "http://a/late") is not honoured
        assert robots.allowed(UA, "http://a/other") is True


def test_500_kib_limit_multibyte_boundary() -> None:
    text = "User-agent: *\nDisallow: /x\n" + "#" + "é" * MAX_ROBOTS_BYTES
    robots = Robots.parse(text)
    assert len(robots.text.encode()) <= MAX_ROBOTS_BYTES
    assert not robots.allowed(UA, "http://a/x")


# --- differential test against Google's matcher ---------------------------------------------


def _google_matches(path: bytes, pattern: bytes) -> bool:
    """RobotsMatchStrategy::Matches of robots.cc, transcribed."""
    positions = [0]
    for i, char in enumerate(pattern):
        if char == ord("$") and i == len(pattern) - 1:
            return positions[-1] == len(path)
        if char == ord("*"):
            positions = list(range(positions[0], len(path) + 1))
        else:
            positions = [p + 1 for p in positions if p < len(path) and path[p] == char]
            if not positions:
                return False
    return True


def _google_allowed(rules: list[tuple[str, str]], path: str) -> bool:
    """RobotsMatcher's verdict for one group: longest escaped pattern wins, allow on ties."""
    best = {"allow": -1, "disallow": -1}
    for key, value in rules:
        value = re.sub(r"%[0-9a-fA-F]{2}", lambda m: m[0].upper(), value)
        pattern = re.sub(rb"[\x80-\xff]", lambda m: b"%%%02X" % m[0][0], value.encode())
        if _google_matches(path.encode(), pattern):
            best[key] = max(best[key], len(pattern))
    return best["disallow"] <= best["allow"] or best["disallow"] == 0


_PIECES = ["a", "b", "/", "?", "=", "&", ".", "~", "$", "*", "%2F", "%2f", "%62", "é"]
_pattern = st.lists(st.sampled_from(_PIECES), max_size=5).map(lambda p: "/" + "".join(p))
_rule = st.tuples(st.sampled_from(["allow", "disallow"]), _pattern)


@settings(max_examples=500, deadline=None)
@given(rules=st.lists(_rule, min_size=1, max_size=4), path=_pattern)
def test_matches_like_google(rules: list[tuple[str, str]], path: str) -> None:
    robots_txt = "User-agent: *\n" + "".join(f"{key}: {value}\n" for key, value in rules)
    assert is_allowed(robots_txt, UA, "http://a" + path) is _google_allowed(rules, path)


# --- crawl-delay and sitemaps --------------------------------------------------------------------

CRAWL_DELAY = [
    ("none", "User-agent: *\nDisallow: /x", None),
    ("global", "User-agent: *\nCrawl-delay: 2.5", 2.5),
    ("specific", "User-agent: *\nCrawl-delay: 9\nUser-agent: crawler-tasks\nCrawl-delay: 1", 1.0),
    (
        "specific-without-delay",
        "User-agent: *\nDisallow: /y\nCrawl-delay: 9\nUser-agent: crawler-tasks\nDisallow:",
        None,
    ),
    # Crawl-delay is no rule: it ends no user-agent list, so both agents form one group.
    ("one-group", "User-agent: *\nCrawl-delay: 9\n\nUser-agent: crawler-tasks\nDisallow: /x", 9.0),
    ("other-agent", "User-agent: other\nCrawl-delay: 9", None),
    ("malformed", "User-agent: *\nCrawl-delay: soon", None),
    ("negative", "User-agent: *\nCrawl-delay: -1", None),
    ("among-agents", "User-agent: crawler-tasks\nCrawl-delay: 4\nUser-agent: b\nDisallow: /", 4.0),
    (
        "among-agents-other",
        "User-agent: b\nCrawl-delay: 4\nUser-agent: crawler-tasks\nDisallow: /",
        4.0,
    ),
    ("after-rules", "User-agent: crawler-tasks\nDisallow: /x\nCrawl-delay: 3", 3.0),
    ("before-any-agent", "Crawl-delay: 3\nUser-agent: crawler-tasks\nDisallow: /x", None),
]


@pytest.mark.parametrize(
    ("robots_txt", "delay"), [pytest.param(*c[1:], id=c[0]) for c in CRAWL_DELAY]
)
def test_crawl_delay(robots_txt: str, delay: float | None) -> None:
    assert crawl_delay(robots_txt, UA) == delay


def test_sitemaps() -> None:
    text = (
        "Sitemap: http://a/1.xml\n"
        "User-agent: b\n"
        "sitemap: http://a/2.xml # comment\n"
        "User-agent: *\n"
        "Disallow: /\n"
        "Site-map: http://a/3.xml\n"
        "Sitemap:\n"
        "Sitemap: http://a/4.xml\x85junk\n"
    )
    assert sitemaps(text) == ["http://a/1.xml", "http://a/2.xml", "http://a/3.xml"]
    assert sitemaps("") == []
    # The sitemap line did not split the two user agents into separate groups.
    assert not is_allowed(text, "b", "http://a/x")


def test_robots_object() -> None:
    robots = Robots.parse("User-agent: *\nDisallow: /x\nCrawl-delay: 2\nSitemap: http://a/s.xml")
    assert robots.kind == "parsed"
    assert [robots.allowed(UA, f"http://a/{p}") for p in ("x", "y", "x/z")] == [False, True, False]
    assert robots.crawl_delay(UA) == 2.0
    assert robots.sitemaps == ["http://a/s.xml"]
    allow, deny = Robots.allow_all(), Robots.disallow_all()
    assert (allow.kind, allow.text, deny.kind, deny.text) == ("allow", "", "disallow", "")
    assert allow.allowed(UA, "http://a/x") and not deny.allowed(UA, "http://a/x")
    assert allow.crawl_delay(UA) is None and deny.sitemaps == []
    assert "parsed" in repr(robots)
