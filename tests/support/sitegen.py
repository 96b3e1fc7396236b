"""Synthetic websites on loopback, for exact crawl tests and politeness benchmarks.

Three parts:

1. ``generate()`` builds a deterministic link graph over one or more hosts, and ``reachable()``
   computes the set of URLs a correct crawler must bring to a final state, so crawl output can be
   compared *exactly* (not "roughly 5,000 pages") with the expected set.
2. ``SiteServer`` serves such a graph from one loopback address (``127.0.0.2``, ``127.0.0.3``, ...,
   each one a distinct host to the crawler) and logs every request with arrival and completion
   times, so ``rate_report()`` and ``max_concurrency()`` can check politeness.
3. ``hostile_routes()`` are handlers for robustness tests (redirect loops, trickling responses,
   gzip bombs, crawler traps, connection resets, ...), mounted with ``extra_routes=``.

Typical use::

    with running_sites(["127.0.0.2", "127.0.0.3"], pages_per_host=200, links_per_page=8) as (
        graph,
        servers,
    ):
        expected = reachable(graph, [servers[0].base_url + "/"])
        ...  # crawl, then compare the crawled URL set with `expected`
        print(rate_report(servers[0].log, servers[0].netloc))

Everything binds to 127.0.0.x only; nothing here talks to the network.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import math
import posixpath
import random
import secrets
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urldefrag, urlsplit

__all__ = [
    "Graph",
    "Handler",
    "Page",
    "Request",
    "RouteHandler",
    "SKIP_EXTENSIONS",
    "SiteServer",
    "WRONG_CHARSET_TITLE",
    "free_port",
    "generate",
    "has_skipped_extension",
    "hostile_routes",
    "make_sites",
    "max_concurrency",
    "rate_report",
    "reachable",
    "render_html",
    "running_sites",
    "serve_hosts",
]

log = logging.getLogger(__name__)

HTML_TYPE = "text/html; charset=utf-8"

#: Path extensions the crawler never enqueues because they are almost never HTML. ``reachable()``
#: mirrors that rule: a link whose path ends in one of these is not part of the expected set even
#: though the server would answer it.
SKIP_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".pdf",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".css",
        ".js",
        ".zip",
        ".gz",
        ".mp4",
        ".mp3",
        ".svg",
        ".ico",
        ".woff",
        ".woff2",
    }
)


# ----------------------------------------------------------------------------------------------
# 1. Link graph
# ----------------------------------------------------------------------------------------------


@dataclass
class Page:
    """One URL of the synthetic web.

    ``links`` are the absolute, fragment-free targets of every ``<a href>`` on the page, in page
    order and with duplicates, i.e. what a link extractor should produce. ``hrefs`` (same length
    and order) are the raw attribute values written into the HTML, which may be relative,
    protocol-relative or carry a ``#fragment``; empty for hand-built pages, which are then
    rendered with absolute hrefs. ``body`` overrides rendering (used for non-HTML files).
    """

    url: str
    status: int = 200
    content_type: str = HTML_TYPE
    links: list[str] = field(default_factory=list)
    hrefs: list[str] = field(default_factory=list)
    body: bytes | None = None

    @property
    def is_html(self) -> bool:
        return self.status == 200 and self.content_type.startswith("text/html")


@dataclass
class Graph:
    """``pages`` maps full URL (``http://127.0.0.2:8001/d0/p7``) to its ``Page``.

    Contains every URL any page links to, including broken-link targets (status 404) and
    non-HTML files, so the server and ``reachable()`` work from the same data.
    """

    pages: dict[str, Page]
    hosts: list[str] = field(default_factory=list)  # base URLs, e.g. "http://127.0.0.2:8001"

    def roots(self) -> list[str]:
        return [host + "/" for host in self.hosts]

    def urls_on(self, base_url: str) -> list[str]:
        netloc = urlsplit(base_url).netloc
        return [url for url in self.pages if urlsplit(url).netloc == netloc]


def _html_path(index: int, slug: str = "") -> str:
    # Two-level paths ("/d3/p317") so that "p318" and "../d4/p402" are meaningful relative hrefs.
    return "/" if index == 0 else f"/d{index // 100}/p{index}{slug}"


# Non-HTML leaves cycle through these kinds. Half have skip-listed extensions (the crawler never
# fetches them), half live at extension-less paths and are only recognisable by Content-Type, so
# the crawler must fetch them and then decline to parse them.
_NON_HTML_KINDS: list[tuple[str, str]] = [
    ("/files/doc{}.pdf", "application/pdf"),
    ("/data/{}", "application/json"),
    ("/img/{}.png", "image/png"),
    ("/blob/{}", "application/octet-stream"),
]


def _non_html_body(path: str, content_type: str, index: int) -> bytes:
    if content_type == "application/pdf":
        return b"%PDF-1.4\n% synthetic\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF\n"
    if content_type == "image/png":
        return b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    if content_type == "application/json":
        # Looks a little like HTML on purpose: only the Content-Type says "don't parse me".
        return f'{{"id": {index}, "path": "{path}", "html": "<a href=\\"/d0/p1\\">x</a>"}}'.encode()
    return random.Random(index).randbytes(256)


def _href(rng: random.Random, from_path: str, target_url: str, target_path: str) -> str:
    """Write ``target`` the way real sites do: relative, root-relative or absolute."""
    roll = rng.random()
    if roll < 0.40:
        rel = posixpath.relpath(target_path, posixpath.dirname(from_path))
        # relpath gives "." for the directory itself; "./" is the spelling browsers see in the wild.
        if rel == ".":
            rel = "./"
        elif rng.random() < 0.1:
            rel = "./" + rel
        return rel
    if roll < 0.75:
        return target_path
    return target_url


def generate(
    hosts: list[str],
    pages_per_host: int,
    links_per_page: int,
    seed: int = 0,
    broken_ratio: float = 0.02,
    non_html_ratio: float = 0.02,
    cross_host_ratio: float = 0.05,
    nav_links: int = 0,
    slug: str = "",
) -> Graph:
    """Build a deterministic link graph over ``hosts`` (base URLs like ``http://127.0.0.2:8001``).

    Per host: ``pages_per_host`` HTML pages (``/`` and ``/d<i//100>/p<i>``), plus
    ``ceil(non_html_ratio * pages)`` non-HTML files and ``ceil(broken_ratio * pages)`` 404
    targets. Each HTML page gets ~``links_per_page`` links: its spanning-tree children (so every
    page is reachable from ``/``), then random extras of which a ``broken_ratio`` fraction point
    at 404s, ``non_html_ratio`` at non-HTML files, ``cross_host_ratio`` at another host, and the
    rest at same-host pages (biased towards ``/`` to make cycles). Also: duplicate links,
    ``#fragment`` hrefs, a ``#top`` self-link, relative/root-relative/absolute/protocol-relative
    spellings. ``nav_links=N`` prepends the same N links (to pages 0..N-1 of the host) on every
    page, like a documentation site's sidebar. ``slug`` lengthens every page's path
    (``/d3/p317-linen-shirt``), for URLs as long as real ones.
    """
    if pages_per_host < 1:
        raise ValueError("pages_per_host must be >= 1")
    rng = random.Random(seed)
    hosts = [h.rstrip("/") for h in hosts]
    pages: dict[str, Page] = {}
    # round() first so 0.07 * 100 = 7.000000000000001 doesn't become 8.
    n_non_html = math.ceil(round(non_html_ratio * pages_per_host, 6))
    n_broken = math.ceil(round(broken_ratio * pages_per_host, 6))
    # Tree fan-out: about half the link budget, so tree edges leave room for random extras.
    fanout = max(2, links_per_page // 2)
    nav = min(nav_links, pages_per_host)

    for host in hosts:
        html_paths = [_html_path(i, slug) for i in range(pages_per_host)]
        for path in html_paths:
            pages[host + path] = Page(url=host + path)
        leaves, broken = _add_leaves(pages, host, n_non_html, n_broken)
        children, attached = _tree(rng, pages_per_host, fanout, leaves + broken)
        site = _Site(
            host=host,
            html_paths=html_paths,
            leaves=leaves,
            broken=broken,
            others=[h for h in hosts if h != host],
            ratios=(broken_ratio, non_html_ratio, cross_host_ratio),
        )
        for index, from_path in enumerate(html_paths):
            targets: list[tuple[str, str]] = [(host, html_paths[c]) for c in children[index]]
            targets += [(host, p) for p in attached[index]]
            _add_random_targets(rng, site, targets, links_per_page)
            rng.shuffle(targets)
            _link(rng, pages[host + from_path], host, from_path, targets, html_paths[:nav])
    return Graph(pages=pages, hosts=hosts)


@dataclass
class _Site:
    """One host of a graph being generated: what its pages' random links may point at."""

    host: str
    html_paths: list[str]
    leaves: list[str]  # non-HTML files
    broken: list[str]  # 404 targets
    others: list[str]  # the other hosts
    ratios: tuple[float, float, float]  # broken, non-HTML, cross-host


def _add_leaves(
    pages: dict[str, Page], host: str, n_non_html: int, n_broken: int
) -> tuple[list[str], list[str]]:
    """Add ``host``'s non-HTML files and 404 targets to ``pages``; returns their paths."""
    leaves: list[str] = []
    for i in range(n_non_html):
        pattern, ctype = _NON_HTML_KINDS[i % len(_NON_HTML_KINDS)]
        path = pattern.format(i)
        pages[host + path] = Page(host + path, 200, ctype, body=_non_html_body(path, ctype, i))
        leaves.append(path)
    broken: list[str] = []
    for i in range(n_broken):
        path = f"/missing/{i}"
        pages[host + path] = Page(host + path, 404, HTML_TYPE)
        broken.append(path)
    return leaves, broken


def _tree(
    rng: random.Random, n_pages: int, fanout: int, leaf_paths: list[str]
) -> tuple[list[list[int]], list[list[str]]]:
    """(children, attached) per page index: a spanning tree from page 0 over a shuffled order,
    and every leaf (non-HTML file, 404 target) attached to one random page, so each is linked."""
    # parent(order[j]) = order[(j - 1) // fanout]
    order = list(range(1, n_pages))
    rng.shuffle(order)
    order.insert(0, 0)
    children: list[list[int]] = [[] for _ in range(n_pages)]
    for j in range(1, n_pages):
        children[order[(j - 1) // fanout]].append(order[j])
    attached: list[list[str]] = [[] for _ in range(n_pages)]
    for path in leaf_paths:
        attached[rng.randrange(n_pages)].append(path)
    return children, attached


def _add_random_targets(
    rng: random.Random, site: _Site, targets: list[tuple[str, str]], links_per_page: int
) -> None:
    """Fill ``targets`` up to ``links_per_page`` with random (host, path) extras."""
    broken_ratio, non_html_ratio, cross_host_ratio = site.ratios
    host, html_paths = site.host, site.html_paths
    while len(targets) < links_per_page:
        roll = rng.random()
        if targets and rng.random() < 0.05:
            targets.append(rng.choice(targets))  # duplicate link on the same page
        elif site.broken and roll < broken_ratio:
            targets.append((host, rng.choice(site.broken)))
        elif site.leaves and roll < broken_ratio + non_html_ratio:
            targets.append((host, rng.choice(site.leaves)))
        elif site.others and roll < broken_ratio + non_html_ratio + cross_host_ratio:
            targets.append((rng.choice(site.others), html_paths[rng.randrange(len(html_paths))]))
        elif rng.random() < 0.1:
            targets.append((host, "/"))  # back to the root: a cycle
        else:
            targets.append((host, html_paths[rng.randrange(len(html_paths))]))


def _link(
    rng: random.Random,
    page: Page,
    host: str,
    from_path: str,
    targets: list[tuple[str, str]],
    nav_paths: list[str],
) -> None:
    """Set ``page``'s hrefs (spelled in assorted ways) and links: the nav, then ``targets``."""
    hrefs = list(nav_paths)
    links = [host + p for p in nav_paths]
    for target_host, target_path in targets:
        url = target_host + target_path
        if target_host != host:
            href = url if rng.random() < 0.8 else url.split(":", 1)[1]  # "//host:port/p"
        else:
            href = _href(rng, from_path, url, target_path)
        if rng.random() < 0.1:
            href += f"#sec{rng.randrange(5)}"
        hrefs.append(href)
        links.append(url)
    if rng.random() < 0.3:
        hrefs.append("#top")
        links.append(page.url)
    page.hrefs = hrefs
    page.links = links


def has_skipped_extension(url: str) -> bool:
    """The crawler's rule: don't enqueue links whose path ends in a non-HTML extension."""
    path = urlsplit(url).path
    ext = posixpath.splitext(path)[1].lower()
    return ext in SKIP_EXTENSIONS


def _normalise_hosts(allowed_hosts: set[str]) -> set[str]:
    # Accept "127.0.0.2", "127.0.0.2:8001" or "http://127.0.0.2:8001" interchangeably.
    out: set[str] = set()
    for h in allowed_hosts:
        out.add(urlsplit(h).netloc.lower() if "://" in h else h.lower().rstrip("/"))
    return out


def reachable(
    graph: Graph,
    seeds: list[str],
    max_depth: int | None = None,
    allowed_hosts: set[str] | None = None,
    refused: Callable[[str], bool] | None = None,
) -> dict[str, int]:
    """URL -> BFS depth for every URL a correct crawler must bring to a final state.

    That includes 404 targets and extension-less non-HTML files (fetched, never parsed), and
    excludes links with a ``SKIP_EXTENSIONS`` path (mirroring the crawler, which never enqueues
    them), fragments (dropped), and URLs whose host is not in ``allowed_hosts`` (matched as
    ``host:port`` or bare hostname; ``None`` allows all). Seeds are depth 0 and included even if
    they have a skipped extension (they were asked for explicitly). Pages at ``max_depth`` are
    fetched but their links are not followed. URLs not in the graph count as reached (the server
    answers them 404). Links ``refused`` says robots.txt disallows are neither reached nor
    followed.
    """
    allowed = _normalise_hosts(allowed_hosts) if allowed_hosts is not None else None

    def host_ok(url: str) -> bool:
        if allowed is None:
            return True
        parts = urlsplit(url)
        return parts.netloc.lower() in allowed or (parts.hostname or "") in allowed

    depth: dict[str, int] = {}
    frontier: list[str] = []
    for seed in seeds:
        url = urldefrag(seed)[0]
        if url not in depth and host_ok(url):
            depth[url] = 0
            frontier.append(url)
    level = 0
    while frontier and (max_depth is None or level < max_depth):
        next_frontier: list[str] = []
        for url in frontier:
            for link in _followed(graph, url, lambda u: u not in depth and host_ok(u), refused):
                if link not in depth:  # two links of one page may differ by a fragment only
                    depth[link] = level + 1
                    next_frontier.append(link)
        frontier = next_frontier
        level += 1
    return depth


def _followed(
    graph: Graph, url: str, wanted: Callable[[str], bool], refused: Callable[[str], bool] | None
) -> list[str]:
    """The fragment-free links of ``url``'s page a crawler follows: ``wanted``, not of a skipped
    extension, not ``refused``; none when ``url`` is not an HTML page of the graph."""
    page = graph.pages.get(url)
    if page is None or not page.is_html:
        return []
    links = (urldefrag(link)[0] for link in page.links)
    return [
        link
        for link in links
        if wanted(link)
        and not has_skipped_extension(link)
        and not (refused is not None and refused(link))
    ]


def render_html(page: Page) -> bytes:
    """The HTML for ``page``; the ``<title>`` is always ``Page <path>``."""
    path = urlsplit(page.url).path or "/"
    hrefs = page.hrefs or page.links
    parts = [
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f'<title>Page {escape(path)}</title></head>\n<body>\n<h1 id="top">Page {escape(path)}</h1>\n'
    ]
    if page.status == 404:
        parts.append("<p>Not found.</p>\n")
    parts.extend(f'<a href="{escape(h)}">link {i}</a>\n' for i, h in enumerate(hrefs))
    parts.append("</body></html>\n")
    return "".join(parts).encode()


# ----------------------------------------------------------------------------------------------
# 2. Servers and request logs
# ----------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One request as the server saw it. ``time``/``end`` are ``time.monotonic()`` at dispatch and
    after the last response byte was handed to the kernel (``None`` while still in flight)."""

    time: float
    host: str  # Host header, e.g. "127.0.0.2:8001"
    path: str  # path + query as requested
    address: str  # the server's bind address that received it, e.g. "127.0.0.2"
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    client: str = ""  # "ip:port" of the client socket (distinguishes connections)
    status: int | None = None
    end: float | None = None


RouteHandler = Callable[["Handler"], None]

# Errors that only mean "the client went away"; not worth a traceback in test output.
_DISCONNECT_ERRORS = (ConnectionError, TimeoutError, socket.timeout)


class Handler(BaseHTTPRequestHandler):
    """Request handler. Route handlers receive it and write their own response."""

    protocol_version = "HTTP/1.1"  # keep-alive, like real servers
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    timeout = 30  # idle keep-alive connections must not pin threads forever
    server_version = "sitegen/1.0"
    sys_version = ""
    server: _Server

    _status: int | None = None
    _headers_buffer: list[bytes]  # BaseHTTPRequestHandler internals, used by send_body()

    @property
    def site(self) -> SiteServer:
        return self.server.site

    @property
    def path_only(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.path.split("?", 1)[1] if "?" in self.path else ""

    def setup(self) -> None:
        super().setup()
        self.site._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.site._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: thousands of requests per test

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def send_body(
        self,
        status: int,
        body: bytes,
        content_type: str = HTML_TYPE,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """A complete response with Content-Length (keeps the connection reusable); gzip
        compressed (level 6, no time stamp: the same bytes every time, as nginx and Apache
        send) when the site's ``gzip`` says so of the path and the client accepts it."""
        coding = self.site.gzip is not None and self.site.gzip(self.path) and bool(body)
        if coding and "gzip" in self.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, 6, mtime=0)
            headers = {**(headers or {}), "Content-Encoding": "gzip"}
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        # Like end_headers(), but headers and body leave in one send(): one segment and one
        # client wake-up per small page instead of two.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def send_validated(self, status: int, body: bytes, content_type: str) -> None:
        """With an ETag, and 304 to a request whose If-None-Match names it (recrawls)."""
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        if status == 200 and self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_body(status, body, content_type, {"ETag": etag})

    def redirect(self, location: str, status: int = 302) -> None:
        self.send_body(status, b"", headers={"Location": location})

    def not_found(self) -> None:
        self.send_body(404, b"<html><head><title>404</title></head><body>Not found</body></html>")

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        site = self.site
        entry = Request(
            time=time.monotonic(),
            host=self.headers.get("Host", ""),
            path=self.path,
            address=site.address,
            method=self.command,
            headers=dict(self.headers.items()),
            client=f"{self.client_address[0]}:{self.client_address[1]}",
        )
        site._record(entry)
        self._status = None
        try:
            if site.delay > 0 and site.stopping.wait(site.delay):
                self.close_connection = True
                return
            route = site._find_route(self.path_only)
            if route is not None:
                route(self)
            elif self.path_only == "/robots.txt" and site.robots_txt is not None:
                self.send_body(200, site.robots_txt.encode(), "text/plain; charset=utf-8")
            else:
                static = site._static.get(self.path)
                if static is None:
                    self.not_found()
                elif site.etags is not None and site.etags(self.path):
                    self.send_validated(*static)
                else:
                    self.send_body(*static)
        finally:
            entry.status = self._status
            entry.end = time.monotonic()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default (True) joins every handler thread in server_close(), which hangs on idle
    # keep-alive connections and on the trickling hostile routes.
    block_on_close = False
    request_queue_size = 256  # benchmarks open many connections at once
    site: SiteServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, _DISCONNECT_ERRORS) or self.site.stopping.is_set():
            return
        log.exception("sitegen: error handling request from %s", client_address)


class SiteServer:
    """Serves the pages of ``graph`` whose URL matches this server's ``base_url``.

    Binds in ``__init__`` (``port=0`` picks a free port), so ``base_url`` is known before the
    graph is generated; assign ``server.graph = graph`` afterwards. Routing order:
    ``extra_routes`` (exact path, else longest key ``k`` with ``path.startswith(k + "/")``),
    ``/robots.txt`` (if ``robots_txt`` is given), graph pages (exact path + query), else 404.
    ``delay`` seconds are slept before every response.
    """

    def __init__(
        self,
        graph: Graph | None = None,
        address: str = "127.0.0.1",
        port: int = 0,
        robots_txt: str | None = None,
        extra_routes: Mapping[str, RouteHandler] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.address = address
        self.robots_txt = robots_txt
        self.extra_routes: dict[str, RouteHandler] = dict(extra_routes or {})
        self.delay = delay
        #: Which paths carry an ETag and answer 304 to it (None: none do).
        self.etags: Callable[[str], bool] | None = None
        #: Which paths are sent gzip-compressed to clients that accept it (None: none are).
        self.gzip: Callable[[str], bool] | None = None
        self.log: list[Request] = []
        self.stopping = threading.Event()
        #: Scratch space for stateful routes (/flaky, /rate-limited); guard with ``state_lock``.
        self.state: dict[str, Any] = {}
        self.state_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._static: dict[str, tuple[int, bytes, str]] = {}
        self._graph: Graph | None = None
        self._thread: threading.Thread | None = None
        self._httpd = _Server((address, port), Handler)
        self._httpd.site = self
        self.port: int = self._httpd.server_address[1]
        self.netloc = f"{address}:{self.port}"
        self.base_url = f"http://{self.netloc}"
        self.graph = graph

    @property
    def graph(self) -> Graph | None:
        return self._graph

    @graph.setter
    def graph(self, graph: Graph | None) -> None:
        # Pre-render every page of this host once: the benchmark needs >1,500 req/s, which
        # rules out rendering per request.
        static: dict[str, tuple[int, bytes, str]] = {}
        for url, page in (graph.pages if graph else {}).items():
            parts = urlsplit(url)
            if parts.netloc != self.netloc:
                continue
            body = page.body if page.body is not None else render_html(page)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            static[target] = (page.status, body, page.content_type)
        self._graph = graph
        self._static = static

    def _record(self, entry: Request) -> None:
        with self._log_lock:
            self.log.append(entry)

    def requests(self) -> list[Request]:
        """A consistent snapshot of the log."""
        with self._log_lock:
            return list(self.log)

    def clear_log(self) -> None:
        with self._log_lock:
            self.log.clear()

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._log_lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _find_route(self, path: str) -> RouteHandler | None:
        routes = self.extra_routes
        if not routes:
            return None
        if path in routes:
            return routes[path]
        prefix = path
        while "/" in prefix[1:]:
            prefix = prefix.rsplit("/", 1)[0]
            if prefix in routes:
                return routes[prefix]
        return None

    def start(self) -> SiteServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"sitegen-{self.netloc}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()  # wakes up trickling/endless routes and delays
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        # Kick idle keep-alive connections so their handler threads exit now, not at timeout.
        with self._log_lock:
            conns = list(self._conns)
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SiteServer({self.base_url}, pages={len(self._static)})"


def free_port(address: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (racy by nature; prefer binding with port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _split_address(address: str) -> tuple[str, int | None]:
    if ":" in address:
        host, port = address.rsplit(":", 1)
        return host, int(port)
    return address, None


@contextmanager
def serve_hosts(
    graph: Graph | None,
    addresses: list[str],
    robots_txt: str | Mapping[str, str] | None = None,
    extra_routes: Mapping[str, RouteHandler] | None = None,
    delay: float = 0.0,
) -> Iterator[list[SiteServer]]:
    """One started ``SiteServer`` per address (``"127.0.0.2"`` or ``"127.0.0.2:8001"``).

    Without an explicit port, the port of the graph host with that address is used, so a graph
    generated for ``http://127.0.0.2:8001`` is served there. ``robots_txt`` may be a mapping
    from address (without port) to robots.txt text.
    """
    graph_ports: dict[str, int] = {}
    for host in graph.hosts if graph else []:
        parts = urlsplit(host)
        if parts.hostname and parts.port:
            graph_ports[parts.hostname] = parts.port
    servers: list[SiteServer] = []
    try:
        for address in addresses:
            host, port = _split_address(address)
            robots = robots_txt.get(host) if isinstance(robots_txt, Mapping) else robots_txt
            server = SiteServer(
                graph,
                host,
                port if port is not None else graph_ports.get(host, 0),
                robots_txt=robots,
                extra_routes=extra_routes,
                delay=delay,
            )
            servers.append(server.start())
        yield servers
    finally:
        for server in servers:
            server.stop()


def make_sites(
    addresses: list[str],
    pages_per_host: int,
    links_per_page: int,
    *,
    seed: int = 0,
    broken_ratio: float = 0.02,
    non_html_ratio: float = 0.02,
    cross_host_ratio: float = 0.05,
    nav_links: int = 0,
    slug: str = "",
    robots_txt: str | Mapping[str, str] | None = None,
    extra_routes: Mapping[str, RouteHandler] | None = None,
    delay: float = 0.0,
    start: bool = True,
) -> tuple[Graph, list[SiteServer]]:
    """Bind one server per address (free ports), generate a graph over their base URLs, and
    serve it. The caller must ``stop()`` the servers; ``running_sites()`` does that for you."""
    servers: list[SiteServer] = []
    try:
        for address in addresses:
            host, port = _split_address(address)
            robots = robots_txt.get(host) if isinstance(robots_txt, Mapping) else robots_txt
            servers.append(
                SiteServer(None, host, port or 0, robots, extra_routes=extra_routes, delay=delay)
            )
        graph = generate(
            [s.base_url for s in servers],
            pages_per_host,
            links_per_page,
            seed=seed,
            broken_ratio=broken_ratio,
            non_html_ratio=non_html_ratio,
            cross_host_ratio=cross_host_ratio,
            nav_links=nav_links,
            slug=slug,
        )
        for server in servers:
            server.graph = graph
            if start:
                server.start()
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return graph, servers


@contextmanager
def running_sites(
    addresses: list[str], pages_per_host: int, links_per_page: int, **kwargs: Any
) -> Iterator[tuple[Graph, list[SiteServer]]]:
    """``make_sites()`` as a context manager that stops the servers on exit."""
    graph, servers = make_sites(addresses, pages_per_host, links_per_page, **kwargs)
    try:
        yield graph, servers
    finally:
        for server in servers:
            server.stop()


def _host_matches(entry: Request, host: str | None) -> bool:
    if host is None:
        return True
    if "://" in host:
        host = urlsplit(host).netloc
    return host in (entry.host, entry.host.rsplit(":", 1)[0], entry.address)


#: The window in which a pace of rate + burst per second is judged from server stamps: a GCRA
#: may send requests exactly 1 s apart at a window's two ends, and the server stamps each a
#: little late by a varying amount on a loaded machine (broad_web.STAMP_TOLERANCE, 0.15 s), so
#: a 1-s window can catch one more although every send kept the pace (seen under the whole
#: suite's load; broad_web.impolite_hosts judges the broad crawl the same way).
PACE_WINDOW = 0.85


def rate_report(log: list[Request], host: str | None = None, window: float = 1.0) -> dict[str, Any]:
    """Politeness numbers for requests to ``host`` (Host header ``ip:port``, bare ip, server
    address or base URL; ``None`` = all).

    ``max_in_window``: most request *starts* in any half-open sliding window of ``window``
    seconds; ``min_interval``: smallest gap between consecutive starts (``inf`` if < 2 requests);
    ``mean_rate``: requests per second over the whole span.
    """
    times = sorted(e.time for e in list(log) if _host_matches(e, host))
    best = 0
    lo = 0
    for hi, t in enumerate(times):
        while t - times[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {
        "count": len(times),
        "max_in_window": best,
        "window": window,
        "min_interval": min(gaps) if gaps else float("inf"),
        "duration": span,
        "mean_rate": (len(times) - 1) / span if span > 0 else 0.0,
    }


def max_concurrency(log: list[Request], host: str | None = None) -> int:
    """Most requests to ``host`` in flight at once (by ``time``..``end``; in-flight requests
    count as never ending). 1 means no two requests ever overlapped."""
    events: list[tuple[float, int]] = []
    for e in list(log):
        if _host_matches(e, host):
            events.append((e.time, 1))
            events.append((e.end if e.end is not None else float("inf"), -1))
    # At equal timestamps process ends (-1) before starts: back-to-back is not overlap.
    events.sort()
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


# ----------------------------------------------------------------------------------------------
# 3. Hostile routes
# ----------------------------------------------------------------------------------------------

#: The <title> of /wrong-charset once correctly decoded as windows-1251.
WRONG_CHARSET_TITLE = "Новости дня"

_WRONG_CHARSET_HTML = (
    '<!DOCTYPE html>\n<html><head><meta charset="windows-1251">'
    f"<title>{WRONG_CHARSET_TITLE}</title></head>\n"
    "<body><h1>Главная</h1><p>Съешь же ещё этих мягких французских булок.</p>"
    '<a href="/wrong-charset/meta-only">ещё</a></body></html>\n'
)

_lazy_lock = threading.Lock()
_lazy: dict[str, bytes] = {}


def _lazy_bytes(name: str, build: Callable[[], bytes]) -> bytes:
    # Built on first use and shared by all servers: the bomb costs ~0.3 s, 100k links ~0.1 s.
    with _lazy_lock:
        if name not in _lazy:
            _lazy[name] = build()
        return _lazy[name]


def _build_gzip_bomb(megabytes: int = 1024) -> bytes:
    """gzip stream inflating to ``megabytes`` MiB (~1 KiB per MiB compressed).

    Deflating 1 GiB takes seconds; instead compress one MiB of spaces after a full flush (which
    resets the compressor, so every such block is byte-identical) and repeat it.
    """
    mib = 1 << 20
    head = b"<!DOCTYPE html><html><head><title>bomb</title></head><body>"
    first = head + b" " * (mib - len(head))
    filler = b" " * mib
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = [comp.compress(first) + comp.flush(zlib.Z_FULL_FLUSH)]
    block = comp.compress(filler) + comp.flush(zlib.Z_FULL_FLUSH)
    out.extend([block] * (megabytes - 2))
    out.append(comp.compress(filler) + comp.flush(zlib.Z_FINISH))
    crc = zlib.crc32(first)
    for _ in range(megabytes - 1):
        crc = zlib.crc32(filler, crc)
    header = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x02\xff"
    trailer = struct.pack("<II", crc, (megabytes * mib) & 0xFFFFFFFF)
    return header + b"".join(out) + trailer


def _simple_page(title: str, hrefs: list[str] | tuple[str, ...] = ()) -> bytes:
    links = "".join(f'<a href="{escape(h)}">{escape(h)}</a>\n' for h in hrefs)
    return (
        f"<!DOCTYPE html>\n<html><head><title>{escape(title)}</title></head>\n"
        f"<body><h1>{escape(title)}</h1>\n{links}</body></html>\n"
    ).encode()


def _query_float(handler: Handler, name: str, default: float) -> float:
    # Trickle speeds can be overridden (?interval=0.01) so tests need not wait a minute.
    for part in handler.query.split("&"):
        key, _, value = part.partition("=")
        if key == name:
            try:
                return float(value)
            except ValueError:
                break
    return default


def _redirect_loop(h: Handler) -> None:
    h.redirect("/redirect-loop/b" if h.path_only == "/redirect-loop" else "/redirect-loop")


def _redirect_chain(h: Handler) -> None:
    tail = h.path_only[len("/redirect-chain/") :]
    if not tail.isdigit() or int(tail) > 10_000:
        h.not_found()
    elif int(tail) == 0:
        h.send_body(200, _simple_page("Page /redirect-chain/0"))
    else:
        h.redirect(f"/redirect-chain/{int(tail) - 1}")


def _slow_trickle(h: Handler) -> None:
    interval = _query_float(h, "interval", 0.5)
    length = max(1, int(_query_float(h, "duration", 60.0) / interval))
    h.send_response(200)
    h.send_header("Content-Type", HTML_TYPE)
    h.send_header("Content-Length", str(length))
    h.end_headers()
    if h.command == "HEAD":
        return
    for _ in range(length):
        if h.site.stopping.wait(interval):
            h.close_connection = True  # the body is incomplete: the connection is unusable
            return
        h.wfile.write(b" ")


def _slow_headers(h: Handler) -> None:
    interval = _query_float(h, "interval", 0.5)
    body = _simple_page("Page /slow-headers")
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"X-Padding: {'.' * 40}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    h._status = 200  # written by hand, so send_response() doesn't record it
    h.close_connection = True
    for i in range(len(head)):
        if h.site.stopping.wait(interval):
            return
        h.wfile.write(head[i : i + 1])
    h.wfile.write(body)


def _endless(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", HTML_TYPE)
    h.send_header("Transfer-Encoding", "chunked")
    # Say so, not just do it: a client must never try to reuse a connection we drop.
    h.send_header("Connection", "close")
    h.end_headers()
    if h.command == "HEAD":
        return
    start = b"<!DOCTYPE html><html><head><title>endless</title></head><body>\n"
    chunk = b"<p>and on and on and on</p>\n" * 256
    h.wfile.write(b"%x\r\n%s\r\n" % (len(start), start))
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    # sendall() blocks while the client isn't reading, so this only spins as fast as it reads;
    # a disconnect surfaces as BrokenPipe/ConnectionReset and ends the handler.
    while not h.site.stopping.is_set():
        h.wfile.write(framed)


def _gzip_bomb_body() -> bytes:
    return _lazy_bytes("gzip-bomb", _build_gzip_bomb)


def _gzip_bomb(h: Handler) -> None:
    h.send_body(200, _gzip_bomb_body(), HTML_TYPE, {"Content-Encoding": "gzip"})


def _big(h: Handler) -> None:
    total = 50 * 1024 * 1024
    head = b"<!DOCTYPE html><html><head><title>Page /big</title></head><body>\n"
    block = b"<p>big page filler text, nothing to see here</p>\n" * 1300  # ~64 KiB
    h.send_response(200)
    h.send_header("Content-Type", HTML_TYPE)
    h.send_header("Content-Length", str(total))
    h.end_headers()
    if h.command == "HEAD":
        return
    h.wfile.write(head)
    remaining = total - len(head)
    while remaining > 0 and not h.site.stopping.is_set():
        n = min(len(block), remaining)
        h.wfile.write(block[:n])
        remaining -= n
    if remaining:
        h.close_connection = True


def _big_declared(h: Handler) -> None:
    # Declares 1 GiB, sends 1 KiB, then closes: a crawler that trusts the header should refuse
    # before reading; one that doesn't gets a short read, never a gigabyte.
    h.send_response(200)
    h.send_header("Content-Type", HTML_TYPE)
    h.send_header("Content-Length", str(1 << 30))
    h.send_header("Connection", "close")
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(_simple_page("Page /big-declared").ljust(1024, b" "))


def _wrong_charset(h: Handler) -> None:
    # /wrong-charset: the common misconfiguration -- server default "charset=utf-8" on a legacy
    # windows-1251 page. Per the HTML spec the header wins, so a strict decoder yields U+FFFD;
    # a forgiving crawler notices invalid UTF-8 and falls back to the <meta>. Either way it must
    # not crash. /wrong-charset/meta-only: no charset in the header, so the <meta> is right.
    body = _WRONG_CHARSET_HTML.encode("windows-1251")
    if h.path_only == "/wrong-charset/meta-only":
        h.send_body(200, body, "text/html")
    else:
        h.send_body(200, body, "text/html; charset=utf-8")


def _binary_body() -> bytes:
    return _lazy_bytes("binary", lambda: random.Random(1234).randbytes(64 * 1024))


def _binary_as_html(h: Handler) -> None:
    h.send_body(200, _binary_body(), HTML_TYPE)


def _links_100k_body() -> bytes:
    return _lazy_bytes(
        "links-100k",
        lambda: _simple_page("Page /links-100k", [f"/links-100k/n/{i}" for i in range(100_000)]),
    )


def _links_100k(h: Handler) -> None:
    if h.path_only == "/links-100k":
        h.send_body(200, _links_100k_body())
    elif h.path_only.startswith("/links-100k/n/") and h.path_only.rsplit("/", 1)[1].isdigit():
        h.send_body(200, _simple_page(f"Page {h.path_only}"))
    else:
        h.not_found()


def _calendar(h: Handler) -> None:
    parts = h.path_only.split("/")  # ["", "calendar", YYYY, MM]
    if len(parts) == 2:
        h.send_body(200, _simple_page("Calendar", ["/calendar/2024/01"]))
        return
    if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()):
        h.not_found()
        return
    year, month = int(parts[2]), int(parts[3])
    if not 1 <= month <= 12:
        h.not_found()
        return
    prev_y, prev_m = (year - 1, 12) if month == 1 else (year, month - 1)
    next_y, next_m = (year + 1, 1) if month == 12 else (year, month + 1)
    links = [f"/calendar/{prev_y:04d}/{prev_m:02d}", f"/calendar/{next_y:04d}/{next_m:02d}"]
    h.send_body(200, _simple_page(f"Calendar {year:04d}-{month:02d}", links))


def _count(h: Handler, name: str) -> int:
    """How many times this server has seen ``name`` + path + query (1 on the first request)."""
    key = f"{name}:{h.path}"
    with h.site.state_lock:
        n = h.site.state.get(key, 0) + 1
        h.site.state[key] = n
    return n


def _flaky(h: Handler) -> None:
    if _count(h, "flaky") <= 2:
        h.send_body(500, b"<html><body>Internal Server Error</body></html>")
    else:
        h.send_body(200, _simple_page(f"Page {h.path_only}"))


def _rate_limited(h: Handler) -> None:
    if _count(h, "rate-limited") == 1:
        h.send_body(
            429, b"<html><body>Too Many Requests</body></html>", headers={"Retry-After": "3"}
        )
    else:
        h.send_body(200, _simple_page(f"Page {h.path_only}"))


def _reset(h: Handler) -> None:
    # SO_LINGER with a zero timeout turns close() into a TCP RST: the client sees
    # "connection reset by peer" without any response bytes.
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.close_connection = True
    h.connection.close()  # the fd really closes once rfile is closed too (socket io refcount)
    h.rfile.close()


def _session(h: Handler) -> None:
    # Session-id URLs: every visit mints new URLs, so the site is infinite to a naive crawler.
    links = [f"/session/{secrets.token_hex(8)}?sid={secrets.token_hex(16)}" for _ in range(3)]
    h.send_body(200, _simple_page(f"Session {h.path_only}", links))


_HOSTILE_ENTRY_POINTS = (
    "/redirect-loop",
    "/redirect-chain/5",
    "/redirect-to-metadata",
    "/redirect-to-loopback",
    "/slow-trickle",
    "/slow-headers",
    "/endless",
    "/gzip-bomb",
    "/big",
    "/big-declared",
    "/wrong-charset",
    "/binary-as-html",
    "/links-100k",
    "/calendar/2024/01",
    "/flaky",
    "/rate-limited",
    "/reset",
    "/session/start",
)


def hostile_routes(loopback: str = "http://127.0.0.1:1/") -> dict[str, RouteHandler]:
    """Route handlers for robustness tests, for ``SiteServer(extra_routes=...)``.
    ``/redirect-to-loopback`` redirects to ``loopback``.

    Keys also match sub-paths (``/calendar`` serves ``/calendar/2024/05``). ``/hostile`` is an
    index page linking to one entry point of each, for seeding a crawl. Trickling routes accept
    ``?interval=`` (seconds per byte, default 0.5) and ``/slow-trickle`` ``?duration=`` (60).
    """
    # The large bodies are built now, not by the first request for them: built there (the
    # bomb ~0.3 s, seconds on a busy machine, holding the servers' GIL) they ate into the
    # crawler's timeouts, and a page timed out and was fetched twice.
    for build in (_gzip_bomb_body, _binary_body, _links_100k_body):
        build()
    return {
        "/hostile": lambda h: h.send_body(200, _simple_page("Hostile", _HOSTILE_ENTRY_POINTS)),
        "/redirect-loop": _redirect_loop,
        "/redirect-chain": _redirect_chain,
        "/redirect-to-metadata": lambda h: h.redirect("http://169.254.169.254/latest/meta-data/"),
        "/redirect-to-loopback": lambda h: h.redirect(loopback),
        "/slow-trickle": _slow_trickle,
        "/slow-headers": _slow_headers,
        "/endless": _endless,
        "/gzip-bomb": _gzip_bomb,
        "/big": _big,
        "/big-declared": _big_declared,
        "/wrong-charset": _wrong_charset,
        "/binary-as-html": _binary_as_html,
        "/links-100k": _links_100k,
        "/calendar": _calendar,
        "/flaky": _flaky,
        "/rate-limited": _rate_limited,
        "/reset": _reset,
        "/session": _session,
    }


def _verify_gzip_bomb() -> tuple[int, int]:
    """(compressed, inflated) sizes; slow (inflates 1 GiB), for manual checks only."""
    body = _gzip_bomb_body()
    inflated = 0
    with gzip.GzipFile(fileobj=io.BytesIO(body)) as f:
        while chunk := f.read(1 << 22):
            inflated += len(chunk)
    return len(body), inflated
