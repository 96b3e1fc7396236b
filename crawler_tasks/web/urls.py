"""URL normalisation (the crawler's dedupe key) and link resolution (crawl scope: scope.py).

:func:`normalize` applies RFC 3986 section 6 syntax- and scheme-based normalisation, and only
that, so two URLs get the same key only when every server must treat them alike:

1. ASCII whitespace and C0 controls around the URL are stripped; tab, CR and LF anywhere are
   removed (as browsers do: hrefs get wrapped across lines in HTML source).
2. Only absolute ``http``/``https`` URLs with a ``//`` authority and a non-empty host are
   accepted; everything else raises :class:`InvalidURL` naming the URL (credentials masked).
   Parsing is RFC 3986 appendix B: a backslash is an ordinary character, never a ``/``.
3. Scheme is lower-cased.
4. Userinfo (``user:pw@``) is dropped: credentials never belong in a crawl key, a log line or
   an output file, and the page is the same page with or without them.
5. Host: percent-escapes are decoded (UTF-8); a non-ASCII host is converted to punycode with
   IDNA 2008 + UTS 46 (the ``idna`` package), falling back to the stdlib IDNA 2003 codec when
   that package is missing or refuses the name (emoji, ``_`` next to non-ASCII labels); then
   lower-cased and one trailing dot stripped (``example.com.`` is the same DNS name). Labels
   must be 1-63 chars of ``a-z 0-9 - _``, the name at most 253 chars. A host whose last label
   is numeric must be a strict dotted-quad IPv4 address: the obfuscated forms browsers accept
   (``2130706433``, ``0x7f.1``, ``127.1``, ``010.0.0.1``) are rejected, not guessed at.
6. IPv6 literals stay in brackets in RFC 5952 form (lower-case, zeros compressed); zone ids
   and IPvFuture are rejected.
7. Port: must be decimal 1-65535; leading zeros dropped; the scheme's default port (80/443) and
   an empty port (``host:``) are removed.
8. Path: empty becomes ``/``; percent-encoding is normalised (9) and then dot segments are
   removed (RFC 3986 5.2.4), so ``%2E%2E`` counts as ``..``. Case, trailing slashes,
   ``index.html`` and ``www.`` are never touched: those are protocol-based guesses.
9. Percent-encoding, in path and query: hex digits upper-cased; escapes of unreserved
   characters (``A-Z a-z 0-9 - . _ ~``) decoded; all other escapes kept (``%2F``, ``%3A``,
   ``%26``, ``%3D``, ``%2B`` stay encoded: decoding a reserved character changes the URL);
   every character RFC 3986 does not allow there (space, controls, non-ASCII, ``"<>\\^`{|}``,
   ``[ ]``) is encoded as UTF-8; a ``%`` not followed by two hex digits becomes ``%25``.
10. Query: split on ``&``, empty parameters dropped, the rest stably sorted by their
    ``(key, "=" or "", value)`` raw encoded strings. Nothing else: ``+`` stays ``+``,
    repeated keys stay, ``a`` stays ``a`` (not ``a=``). An empty query drops the ``?``.
11. Fragment dropped.

``normalize`` is idempotent and raises nothing but :class:`InvalidURL` on any ``str``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin

from ..errors import ConfigError, InvalidURL

try:
    import idna
except ImportError:  # pragma: no cover - idna comes with requests
    idna = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import tldextract

_STRIP = "".join(map(chr, range(0x21)))
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = [f"%{b:02X}" for b in range(256)]
_PCHAR = r"A-Za-z0-9\-._~!$&'()*+,;=:@"
# Fast path: a component made only of these characters is already normal.
_PATH_OK = re.compile(rf"[{_PCHAR}/]*")
_QUERY_OK = re.compile(rf"[{_PCHAR}/?]*")
# Slow path: each match is an escape, a stray "%", or a run of characters needing encoding.
_PATH_FIX = re.compile(rf"%[0-9A-Fa-f]{{2}}|%|[^{_PCHAR}/%]+")
_QUERY_FIX = re.compile(rf"%[0-9A-Fa-f]{{2}}|%|[^{_PCHAR}/?%]+")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_AUTHORITY_END = re.compile(r"[/?#]")
_USERINFO = re.compile(r"(//[^/?#@:]*:)[^/?#@]*@")


def _clean(text: str) -> str:
    text = text.strip(_STRIP)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "").replace("\n", "").replace("\r", "")
    return text


def _invalid(url: str, why: str) -> InvalidURL:
    shown = _USERINFO.sub(r"\1***@", url[:300])  # a bad URL may still carry a password
    return InvalidURL(f"invalid URL {shown!r}: {why}", url=shown, why=why)


def _fix_escape(match: re.Match[str]) -> str:
    text = match.group()
    if text[0] == "%":
        if len(text) == 1:
            return "%25"
        char = chr(int(text[1:], 16))
        return char if char in _UNRESERVED else text.upper()
    try:
        return "".join(_HEX[b] for b in text.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogate: no UTF-8 form, so no URL form
        raise InvalidURL("not encodable as UTF-8") from None


def _remove_dot_segments(path: str) -> str:
    if "/." not in path:
        return path
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):  # "/a/b/.." is the directory "/a/", keep its slash
        out.append("")
    return "/" + "/".join(out)


def _normalize_query(query: str) -> str:
    if not _QUERY_OK.fullmatch(query):
        query = _QUERY_FIX.sub(_fix_escape, query)
    params = [p for p in query.split("&") if p]
    if len(params) > 1:
        params.sort(key=lambda p: p.partition("="))
    return "&".join(params)


def _idna_encode(host: str) -> str:
    if idna is not None:
        try:
            return idna.encode(host, uts46=True).decode("ascii")
        except (UnicodeError, ValueError):
            pass  # IDNA 2008 is strict; IDNA 2003 still names hosts browsers reach
    return host.encode("idna").decode("ascii")


@functools.lru_cache(maxsize=8192)
def normalize_host(host: str) -> str:
    """Registered name or IPv4 -> canonical ASCII; raises ValueError (or UnicodeError)."""
    if "%" in host:
        host = unquote(host, errors="strict")
    if not host.isascii():
        host = _idna_encode(host)
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError("bad host")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # ipaddress is strict: exactly four decimal parts, no leading zeros
        return str(ipaddress.IPv4Address(host))
    return host


def ipv6_host(address: ipaddress.IPv6Address) -> str:
    mapped = address.ipv4_mapped  # RFC 5952 section 5 keeps the dotted tail readable
    return f"::ffff:{mapped}" if mapped else address.compressed


def _split_host_port(url: str, host_port: str) -> tuple[str, str]:
    if host_port.startswith("["):
        literal, bracket, port = host_port[1:].partition("]")
        if not bracket or (port and port[0] != ":"):
            raise _invalid(url, "bad IPv6 literal")
        if "%" in literal:  # a zone id only means something on the sender's machine
            raise _invalid(url, "IPv6 zone id")
        try:
            address = ipaddress.IPv6Address(literal)
        except ValueError:
            raise _invalid(url, "bad IPv6 literal") from None
        return f"[{ipv6_host(address)}]", port[1:]
    raw_host, _, port = host_port.partition(":")
    if not raw_host:
        raise _invalid(url, "empty host")
    try:
        return normalize_host(raw_host), port
    except (ValueError, UnicodeError):
        raise _invalid(url, "bad host") from None


def _normalize_port(url: str, scheme: str, port: str) -> str:
    if not port:
        return ""
    digits = port.lstrip("0")
    if not (port.isascii() and port.isdecimal() and 0 < len(digits) <= 5 and int(digits) < 65536):
        raise _invalid(url, "bad port")
    return "" if digits == _DEFAULT_PORTS[scheme] else ":" + digits


def normalize(url: str) -> str:
    """The canonical form of an absolute http(s) URL (rules in the module docstring)."""
    scheme, colon, rest = _clean(url).partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in _DEFAULT_PORTS:
        raise _invalid(url, "not an http(s) URL")
    if not rest.startswith("//"):
        raise _invalid(url, "no authority")
    rest = rest[2:].partition("#")[0]
    rest, _, query = rest.partition("?")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    host, port = _split_host_port(url, authority.rpartition("@")[2])
    port = _normalize_port(url, scheme, port)
    try:
        if not _PATH_OK.fullmatch(path):
            path = _PATH_FIX.sub(_fix_escape, path)
        path = _remove_dot_segments(path) or "/"
        query = _normalize_query(query) if query else ""
    except InvalidURL as exc:
        raise _invalid(url, str(exc)) from None
    return f"{scheme}://{host}{port}{path}?{query}" if query else f"{scheme}://{host}{port}{path}"


def resolve(base: str, href: str) -> str | None:
    """``href`` joined to ``base`` and normalised, or None when that is no http(s) URL."""
    try:
        return normalize(urljoin(_clean(base), _clean(href)))
    except ValueError:  # InvalidURL, or urljoin choking on a bracket in a netloc
        return None


def _authority_span(url: str) -> tuple[int, int]:
    start = url.find("://") + 3
    end = _AUTHORITY_END.search(url, start)
    return start, end.start() if end else len(url)


def host_of(url: str) -> str:
    """Host of a normalised URL, without port; an IPv6 address comes without brackets."""
    start, end = _authority_span(url)
    host_port = url[start:end].rpartition("@")[2]
    if host_port.startswith("["):
        return host_port[1:].partition("]")[0].lower()
    return host_port.partition(":")[0].lower()


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalised URL: what robots.txt and politeness cover."""
    return url[: _authority_span(url)[1]]


def _path_of(url: str) -> str:
    rest = url[_authority_span(url)[1] :]
    return rest.partition("#")[0].partition("?")[0]


@functools.lru_cache(maxsize=1)
def _suffix_extractor() -> tldextract.TLDExtract:
    import tldextract

    # The bundled snapshot only: no download at run time, no cache files on workers.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def domain_key(url: str, mode: str) -> str:
    """What one politeness bucket covers: the host, or its ICANN registered domain."""
    host = host_of(url)
    if mode == "host":
        return host
    if mode != "registered_domain":
        raise ConfigError(f"unknown domain_key mode {mode!r}")
    if ":" in host or _NUMERIC_LABEL.fullmatch(host.rpartition(".")[2]):
        return host  # IP address: there is no domain above it
    result = _suffix_extractor()(host)
    registered = getattr(result, "top_domain_under_public_suffix", None)
    if registered is None:  # pragma: no cover - tldextract < 5.3
        registered = result.registered_domain
    return str(registered) or host


@functools.lru_cache(maxsize=64)
def domain_counts(urls: tuple[str, ...], mode: str) -> Mapping[str, int]:
    """How many of the normalised ``urls`` fall in each :func:`domain_key` bucket (read-only;
    cached: a crawl's seeds are counted once per process, not once per page)."""
    return MappingProxyType(Counter(domain_key(url, mode) for url in urls))


def has_repeated_segments(url: str, limit: int) -> bool:
    """True when one non-empty path segment occurs ``limit`` times or more (a spider trap).

    ``limit`` below 1 disables the check.
    """
    if limit < 1:
        return False
    counts = Counter(s for s in _path_of(url).split("/") if s)
    return bool(counts) and max(counts.values()) >= limit


# Deliberately absent: xml/rss/atom/txt (sitemaps and feeds carry links) and server-side
# script extensions (php, asp, jsp...), which usually render HTML.
_NON_HTML = """
jpg jpeg jpe png gif bmp tif tiff webp svg svgz ico heic heif avif psd
mp3 wav ogg oga opus flac aac m4a wma mid midi
mp4 m4v webm mkv avi mov wmv flv mpg mpeg 3gp ogv m3u8
zip tar gz tgz bz2 tbz2 xz txz 7z rar lz lzma zst z cab iso dmg
exe msi bin apk deb rpm jar war dll so pkg
pdf doc docx xls xlsx ppt pptx odt ods odp rtf epub mobi ps eps csv
woff woff2 ttf otf eot css js mjs map json wasm swf
"""
NON_HTML_EXTENSIONS = frozenset(_NON_HTML.split())


def looks_non_html(url: str) -> bool:
    """True when the last path segment ends in a known non-HTML extension (any case)."""
    last = _path_of(url).rpartition("/")[2].partition(";")[0]  # drop ";jsessionid=..."
    name, dot, ext = last.rpartition(".")
    return bool(dot and name) and ext.lower() in NON_HTML_EXTENSIONS
