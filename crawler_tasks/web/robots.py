"""robots.txt (RFC 9309): parse once, ask many times, cache per origin in Redis.

Matching follows Google's parser (github.com/google/robotstxt), the reference implementation of
RFC 9309. ``protego`` does the grouping, longest-match ordering and wildcards; where it disagrees
with Google, :func:`_rewrite` turns the file into a canonical one protego reads right:

* Lines are split Google's way (``key value`` for a forgotten colon, key typos, lines cut at
  16663 bytes) and unknown lines dropped: protego let ``Foo: bar`` (or ``Crawl-delay``, which
  is moved after them) split two ``User-agent:`` lines into two groups.
* ``User-agent:`` values become their product token (``Foo Bar/2`` is ``foo``), which the
  caller's token must equal: protego matched substrings (its ``foo`` group caught ``foobot``).
* Rules and paths reach protego in an alphabet its percent-encoding normaliser leaves alone, so
  they compare byte for byte, and rank by length, as in Google's matcher.

Status codes (:func:`policy_for_response`) follow RFC 9309 section 2.3.1; where the parsed
files are cached is :mod:`crawler_tasks.state.robots_cache`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Literal
from urllib.parse import urlsplit

from protego import Protego

#: Bytes of a robots.txt that are parsed (RFC 9309: "at least 500 kibibytes").
MAX_ROBOTS_BYTES = 512_000
#: Redirects followed when fetching robots.txt (RFC 9309: "at least five").
MAX_REDIRECTS = 5

Kind = Literal["parsed", "allow", "disallow"]
#: ``http_get(url) -> (status, Location header, body)``; ``(None, None, b"")`` if unreachable.
#: GET a URL: (status, redirect target, body); when it could not be had, (None, why, b"").
HttpGet = Callable[[str], tuple[int | None, str | None, bytes]]

_MAX_LINE_BYTES = 2083 * 8 - 1  # Google's cut; the start of a cut rule still applies
_WHITESPACE = " \t\n\v\f\r"
_KEYS = {
    "user-agent": ("user-agent", "useragent", "user agent"),
    "allow": ("allow",),
    "disallow": ("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"),
    "sitemap": ("sitemap", "site-map"),
    "crawl-delay": ("crawl-delay", "crawl delay"),
}
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]*")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_NON_ASCII = re.compile(rb"[\x80-\xff]")
# protego scores a group by the length of its name, and ``*`` by 1: the suffix keeps a one-letter
# token from tying with ``*`` and, as "~" is in no token, lets a name match only itself.
_AGENT_SUFFIX = "~"

# Why rules and paths are encoded: protego decodes escapes of unreserved characters (``%62`` is
# ``b``), encodes others (``?`` is ``%3F``) and ranks rules by their length after that, so
# ``Allow: /page?`` outranked ``Disallow: /page*q``. Google compares bytes and ranks by the
# length of the rule with only non-ASCII escaped. So every byte goes to protego as ``.XX``, a
# ``*`` as ``***`` and a final ``$`` as ``~~~``, which ends every path: all three characters,
# so ranks are kept, and none that protego touches. "." and "~" only start a unit, so wherever
# a wildcard lets a piece match, it matches whole units.
_WILDCARD = "***"
_END = "~~~"


def _encode_bytes(raw: bytes) -> str:
    return "." + raw.hex(".").upper() if raw else ""


def _encode_pattern(value: str) -> str:
    """A rule as protego gets it, after Google's escaping (non-ASCII to ``%XX``, escapes
    upper-cased)."""
    anchored = value.endswith("$")
    value = _ESCAPE.sub(lambda m: m[0].upper(), value[:-1] if anchored else value)
    raw = _NON_ASCII.sub(lambda m: b"%%%02X" % m[0][0], value.encode("utf-8", "replace"))
    body = _WILDCARD.join(_encode_bytes(part) for part in raw.split(b"*"))
    return "/" + body + (_END if anchored else "")


def _path_of(url: str) -> tuple[str, str]:
    """(path, path + query) of a URL: what rules match against; the fragment never counts."""
    head = url.partition("#")[0]
    parts = urlsplit(head)
    path = parts.path if parts.path.startswith("/") else "/" + parts.path
    return path, path + ("?" + parts.query if "?" in head else "")


def product_token(user_agent: str) -> str:
    """``"Crawler-Tasks/0.1 (+https://...)"`` -> ``"crawler-tasks"``: what groups are named by."""
    match = _PRODUCT_TOKEN.match(user_agent.lstrip(_WHITESPACE))
    return match[0].lower() if match else ""


def _lines(text: str) -> Iterator[str]:
    for line in re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff")):
        if len(line) * 4 > _MAX_LINE_BYTES:
            line = line.encode("utf-8", "replace")[:_MAX_LINE_BYTES].decode("utf-8", "ignore")
        yield line


def _directive(line: str) -> tuple[str, str] | None:
    """(known key, value) of a line, or None for comments, blank and unknown lines."""
    line = line.partition("#")[0].strip(_WHITESPACE)
    key, colon, value = line.partition(":")
    if not colon:
        # Google accepts whitespace for a forgotten colon, in a line of exactly two words.
        words = re.split(r"[ \t]+", line)
        if len(words) != 2:
            return None
        key, value = words
    key = key.strip(_WHITESPACE).lower()
    name = next((name for name, spellings in _KEYS.items() if key.startswith(spellings)), None)
    return (name, value.strip(_WHITESPACE)) if name else None


def _agent_line(value: str) -> tuple[str, str]:
    """(canonical line, token or "") of a ``User-agent:`` value."""
    if value == "*" or (value.startswith("*") and value[1] in _WHITESPACE):
        return "user-agent: *", ""
    token = product_token(value)
    # An empty value still opens a group, one nobody matches.
    return f"user-agent: {token}{_AGENT_SUFFIX if token else ''}", token


def _rule_lines(key: str, value: str) -> list[str]:
    if not value:
        return [f"{key}:"]  # matches nothing, but ends the list of user agents above it
    lines = [f"{key}: {_encode_pattern(value)}"]
    slash = value.rfind("/")
    if key == "allow" and value[slash:].startswith("/index.htm"):
        # Google: allowing /d/index.html allows /d/ too.
        lines.append(f"allow: {_encode_pattern(value[: slash + 1] + '$')}")
    return lines


def _rewrite(text: str) -> tuple[str, frozenset[str]]:
    """(canonical robots.txt for protego, product tokens named by its groups)."""
    out: list[str] = []
    held: list[str] = []  # Crawl-delay lines met among User-agent lines
    agents: set[str] = set()
    in_agents = False
    for line in _lines(text):
        directive = _directive(line)
        if directive is None:
            continue
        key, value = directive
        if key == "user-agent":
            canonical, token = _agent_line(value)
            out.append(canonical)
            agents.update([token] if token else [])
            in_agents = True
        elif key in ("allow", "disallow"):
            out += held + _rule_lines(key, value)
            held, in_agents = [], False
        elif value and value.splitlines() == [value]:  # protego splits on more than CR/LF
            (held if in_agents and key == "crawl-delay" else out).append(f"{key}: {value}")
    return "\n".join(out + held), frozenset(agents)


def _clip(text: str) -> str:
    """The first :data:`MAX_ROBOTS_BYTES` of ``text``, without a line cut at the limit (a cut
    ``Allow: /public-x`` would read as the broader ``Allow: /p``)."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_ROBOTS_BYTES:
        return text
    head = raw[:MAX_ROBOTS_BYTES]
    if raw[MAX_ROBOTS_BYTES] not in b"\r\n":
        head = head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]
    return head.decode("utf-8", "ignore")


class Robots:
    """The rules of one origin. Build with :meth:`parse`, :meth:`allow_all`, :meth:`disallow_all`
    or :func:`policy_for_response`; ``kind`` and ``text`` are what the cache stores."""

    def __init__(self, kind: Kind, text: str = "", why: str = "") -> None:
        self.kind: Kind = kind
        self.text = text if kind == "parsed" else ""
        #: For a robots.txt that could not be read (disallow-all): why ("HTTP 503",
        #: "connection_error: ... certificate verify failed ..."), shown in the URLs' records.
        self.why = why if kind == "disallow" else ""
        self._parser: Protego | None = None
        self._agents: frozenset[str] = frozenset()
        if kind == "parsed":
            canonical, self._agents = _rewrite(self.text)
            self._parser = Protego.parse(canonical)

    @classmethod
    def parse(cls, text: str) -> Robots:
        return cls("parsed", _clip(text))

    @classmethod
    def allow_all(cls) -> Robots:
        return cls("allow")

    @classmethod
    def disallow_all(cls, why: str = "") -> Robots:
        return cls("disallow", why=why)

    def __repr__(self) -> str:
        return f"Robots({self.kind!r}, {len(self.text)} chars)"

    def _agent(self, user_agent: str) -> str:
        """The name protego knows our group by; ``*`` picks the global group, if any."""
        token = product_token(user_agent)
        return token + _AGENT_SUFFIX if token in self._agents else "*"

    def allowed(self, user_agent: str, url: str) -> bool:
        """May ``user_agent`` fetch ``url`` (normalised, percent-encoded, absolute)?"""
        path, path_query = _path_of(url)
        if path == "/robots.txt":  # RFC 9309 2.2.2: implicitly allowed
            return True
        if self._parser is None:
            return self.kind == "allow"
        encoded = "/" + _encode_bytes(path_query.encode("utf-8", "replace")) + _END
        return self._parser.can_fetch(encoded, self._agent(user_agent))

    def crawl_delay(self, user_agent: str) -> float | None:
        """Seconds of the ``Crawl-delay`` of the group ``user_agent`` obeys, uncapped."""
        return self._parser.crawl_delay(self._agent(user_agent)) if self._parser else None

    @property
    def sitemaps(self) -> list[str]:
        return list(self._parser.sitemaps) if self._parser else []


def is_allowed(robots_txt: str, user_agent: str, url: str) -> bool:
    return Robots.parse(robots_txt).allowed(user_agent, url)


def crawl_delay(robots_txt: str, user_agent: str) -> float | None:
    return Robots.parse(robots_txt).crawl_delay(user_agent)


def sitemaps(robots_txt: str) -> list[str]:
    return Robots.parse(robots_txt).sitemaps


def policy_for_response(status: int | None, body: bytes, why: str = "") -> Robots:
    """RFC 9309 2.3.1: what a robots.txt response means; ``status`` None = unreachable.

    2xx: the body's rules. 4xx: "unavailable", anything may be crawled; but 408 and 429, like
    5xx, mean "unreachable" (as in ``errors.ServerError`` and Google's crawler): crawl nothing
    until retried. A 3xx reaching here had no usable Location: unavailable.
    """
    if status is None or status >= 500 or status < 200 or status in (408, 429):
        return Robots.disallow_all(why or (f"HTTP {status}" if status is not None else ""))
    if status >= 300:
        return Robots.allow_all()
    # One byte past the limit tells _clip whether the file was cut.
    return Robots.parse(body[: MAX_ROBOTS_BYTES + 1].decode("utf-8", "replace"))


def dump(robots: Robots) -> str:
    value = {"kind": robots.kind, "text": robots.text}
    if robots.why:
        value["why"] = robots.why
    return json.dumps(value, separators=(",", ":"))


def load(raw: bytes | str) -> Robots | None:
    """A cached value, or None when it is unreadable (another version wrote it): refetch."""
    try:
        value: Any = json.loads(raw)
        kind, text = value["kind"], value["text"]
    except (ValueError, TypeError, KeyError):
        return None
    if kind == "parsed" and isinstance(text, str):
        return Robots.parse(text)
    why = value.get("why") if isinstance(value.get("why"), str) else ""
    return Robots(kind, why=why) if kind in ("allow", "disallow") else None
