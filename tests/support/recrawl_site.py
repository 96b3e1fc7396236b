"""What the recrawl tests and bench/recrawl.py share: a sitegen site that changes between two
runs of a schedule, and the second run's WARC records resolved against the first run's with a
replay tool's indexer (cdxj-indexer, as pywb indexes)."""

from __future__ import annotations

import bisect
import json
import math
import random
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from tests.support.sitegen import Graph, Page, SiteServer, render_html


def half_with_etags(path: str) -> bool:
    """Every other page (by a stable hash of its path) has an ETag and answers 304."""
    return zlib.crc32(path.encode()) % 2 == 0


def with_text(size: int) -> Callable[[Page], bytes]:
    """Pages of about ``size`` more bytes of text (words drawn per URL), for WARC sizes like
    a real site's: sitegen's own pages are only their links."""
    words = [f"w{i:03d}{'abcdefgh'[i % 8] * (i % 7)}" for i in range(600)]

    def render(page: Page) -> bytes:
        rng = random.Random(page.url)
        text = " ".join(rng.choice(words) for _ in range(size // 7))
        return render_html(page).replace(b"</body>", f"<p>{text}</p></body>".encode())

    return render


def serve(graph: Graph, server: SiteServer, render: Callable[[Page], bytes]) -> None:
    for page in graph.pages.values():
        if page.is_html:
            page.body = render(page)
    server.graph = graph


def change_site(
    graph: Graph,
    server: SiteServer,
    share: float,
    new: int,
    seed: int = 1,
    render: Callable[[Page], bytes] = render_html,
    pages: set[str] | None = None,
) -> tuple[set[str], set[str]]:
    """Change ``share`` of the HTML pages (their text) and add ``new`` pages, each linked from
    a changed page (``pages``: those pages changed instead); serves the new version. Returns
    (changed URLs, new URLs)."""
    rng = random.Random(seed)
    html = sorted(u for u, p in graph.pages.items() if p.is_html)
    changed = pages or set(rng.sample(html, max(1, round(share * len(html)))))
    added = {f"{server.base_url}/new/p{i}" for i in range(new)}
    for i, url in enumerate(sorted(added)):
        graph.pages[url] = Page(url=url)
        graph.pages[url].body = render(graph.pages[url])
        parent = graph.pages[sorted(changed)[i % len(changed)]]
        parent.links.append(url)
        if parent.hrefs:
            parent.hrefs.append(url)
    for url in changed:
        page = graph.pages[url]
        page.body = render(page).replace(b"</body>", b"<p>changed</p></body>")
    server.graph = graph
    return changed, added


@dataclass
class Record:
    type: str
    uri: str
    headers: dict[str, str]
    length: int
    #: A warcinfo record's fields ('' for other records).
    info: str = ""


def warc_records(directory: Path) -> Iterator[tuple[Path, list[Record]]]:
    """Each WARC file of a crawl's directory and its records, in file order."""
    for path in sorted(directory.glob("crawl-*.warc.gz")):
        with open(path, "rb") as f:
            records = [_record(r) for r in ArchiveIterator(f)]
        yield path, records


def _record(r: Any) -> Record:
    content = r.content_stream().read()
    return Record(
        r.rec_type,
        r.rec_headers.get_header("WARC-Target-URI") or "",
        dict(r.rec_headers.headers),
        len(content),
        content.decode() if r.rec_type == "warcinfo" else "",
    )


def cdxj(directory: Path) -> list[dict[str, Any]]:
    """cdxj-indexer's index of a crawl's WARC files: one dict per line, with its timestamp."""
    files = [str(p) for p in sorted(directory.glob("crawl-*.warc.gz"))]
    exe = Path(sys.executable).with_name("cdxj-indexer")
    out = subprocess.run([str(exe), *files], capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        urlkey, timestamp, data = line.split(" ", 2)
        lines.append({"urlkey": urlkey, "timestamp": timestamp, **json.loads(data)})
    return lines


def unresolved(first: Path, second: Path) -> list[str]:
    """The revisit records of run ``second`` that no response of run ``first`` resolves, as
    a replay tool looks them up: the response indexed for WARC-Refers-To-Target-URI at
    WARC-Refers-To-Date (to the second), with the revisit's payload digest."""
    index = {
        (e["url"], e["timestamp"]): e["digest"]
        for e in cdxj(first)
        if e.get("mime") != "warc/revisit"
    }
    bad = []
    for _, records in warc_records(second):
        for r in records:
            if r.type != "revisit":
                continue
            date = r.headers["WARC-Refers-To-Date"]
            stamp = "".join(c for c in date.split(".")[0] if c.isdigit())
            digest = index.get((r.headers["WARC-Refers-To-Target-URI"], stamp))
            if (
                digest is None
                or "sha1:" + digest.removeprefix("sha1:") != r.headers["WARC-Payload-Digest"]
            ):
                bad.append(r.uri)
    return bad


def warcio_check(directory: Path) -> str:
    """``warcio check`` of every WARC file of a crawl ('' when all pass)."""
    files = [str(p) for p in sorted(directory.glob("crawl-*.warc.gz"))]
    exe = Path(sys.executable).with_name("warcio")
    result = subprocess.run([str(exe), "check", "-v", *files], capture_output=True, text=True)
    return "" if result.returncode == 0 else result.stdout[-3000:] + result.stderr[-2000:]


def run_at(settings: Any, client: Any, server: SiteServer, at: float, **options: Any) -> Any:
    """A finished run of schedule ``options["schedule"]`` whose time (what its visits count as
    and due-ness is measured against) is ``at``: a simulated clock, through the real code."""
    from crawler_tasks.state import store as stores
    from crawler_tasks.state.store import RedisHandle
    from crawler_tasks.surface.crawl import Crawl, plan

    host = server.netloc.split(":")[0]
    opts = plan(
        [server.base_url + "/"],
        settings,
        output=settings.output_dir,
        allow_private_networks=True,
        allowed_domains=[host],
        rates={host: math.inf},
        rate=math.inf,
        **{"concurrency": 8, **options},
    )
    store = stores.start(RedisHandle.connect(client, settings.key_prefix), opts, at=at)
    crawl = Crawl(store.id, settings=settings, client=client, store=store)
    summary = crawl.wait(timeout=120)
    assert summary["status"] == "finished", summary
    return crawl


# A site under a simulated clock (bench/adaptive.py, tests/integration/test_adaptive.py) -------

HOUR = 3600.0
DAY = 24 * HOUR
T0 = 1_700_000_000.0


@dataclass
class SimSite:
    """Pages' change times (seconds after T0); the simulated now; what was served."""

    changes: list[list[float]]
    now: float = T0
    #: robots.txt names /sitemap.xml, which lists every page with its last change as lastmod
    sitemap: bool = False
    requests: int = 0
    #: page -> version last served (a 304 serves the version the client has)
    held: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def version(self, page: int, at: float) -> int:
        return bisect.bisect_right(self.changes[page], at - T0)

    def sitemap_xml(self, base: str) -> str:
        entries = []
        for i, times in enumerate(self.changes):
            done = times[: self.version(i, self.now)]
            when = T0 + (done[-1] if done else -DAY)  # never changed: a day before it all
            stamp = datetime.fromtimestamp(when, timezone.utc).isoformat()
            entries.append(f"<url><loc>{base}/p{i}</loc><lastmod>{stamp}</lastmod></url>")
        ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
        return f'<?xml version="1.0"?><urlset xmlns="{ns}">{"".join(entries)}</urlset>'

    def freshness(self, at: float) -> float:
        fresh = sum(self.held.get(i) == self.version(i, at) for i in range(len(self.changes)))
        return fresh / len(self.changes)


def build_site(
    pages: int, span: float, seed: int, mix: list[tuple[float, float]], sitemap: bool = False
) -> SimSite:
    """``pages`` pages, each changing as a Poisson process at one of the rates of ``mix``
    ((changes per second, share of the pages)) over ``span`` seconds after T0."""
    rng = random.Random(seed)
    changes: list[list[float]] = []
    for rate, share in mix:
        for _ in range(round(pages * share)):
            times, t = [], 0.0
            while rate:
                t += rng.expovariate(rate)
                if t > span:
                    break
                times.append(t)
            changes.append(times)
    return SimSite(changes, sitemap=sitemap)


class Handler(BaseHTTPRequestHandler):
    site: SimSite

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        site = self.site
        if self.path == "/robots.txt" and site.sitemap:
            return self._send(200, f"Sitemap: {self._base()}/sitemap.xml\n".encode(), None)
        if self.path == "/sitemap.xml" and site.sitemap:
            return self._send(200, site.sitemap_xml(self._base()).encode(), None)
        if self.path == "/":
            links = "".join(f'<a href="/p{i}">p{i}</a>' for i in range(len(site.changes)))
            return self._send(200, f"<html><body>{links}</body></html>".encode(), '"root"')
        if not self.path.startswith("/p") or not self.path[2:].isdigit():
            return self._send(404, b"", None)
        page = int(self.path[2:])
        with site.lock:
            version = site.version(page, site.now)
            site.requests += 1
            site.held[page] = version
        etag = f'"{page}-{version}"'
        if self.headers.get("If-None-Match") == etag:
            return self._send(304, b"", etag)
        body = f"<html><title>p{page}</title><body>p{page} version {version}</body></html>"
        self._send(200, body.encode(), etag)

    def _base(self) -> str:
        return "http://" + self.headers.get("Host", "")

    def _send(self, status: int, body: bytes, etag: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Server:
    """What run_at needs of a site server: ``netloc`` and ``base_url``."""

    def __init__(self, site: SimSite, address: str) -> None:
        handler = type("SimHandler", (Handler,), {"site": site})
        self.httpd = ThreadingHTTPServer((address, 0), handler)
        self.netloc = f"{address}:{self.httpd.server_address[1]}"
        self.base_url = f"http://{self.netloc}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def run_schedule(settings: Any, base_url: str, schedule: str, *paths: str, **options: Any) -> Any:
    """One run of ``schedule``: a crawl of the site at ``base_url`` from ``paths`` ("/" when
    none), as fast as it goes, waited for."""
    from crawler_tasks import start_crawl

    host = base_url.split("//")[1].split(":")[0]
    crawl = start_crawl(
        [base_url + p for p in paths or ("/",)],
        settings=settings,
        schedule=schedule,
        allow_private_networks=True,
        allowed_domains=[host],
        rates={host: math.inf},
        rate=math.inf,
        concurrency=4,
        **options,
    )
    crawl.wait(timeout=120)
    return crawl
