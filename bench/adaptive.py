"""Adaptive schedules (issue 35) against fixed-period runs, on a simulated site whose pages
change at rates from hourly to never, under a simulated clock driven through the real code:
each run is a real crawl (real workers, a real HTTP server on loopback) whose time is set with
``stores.start(at=...)``, the time its visits count as and due-ness is measured against.

The site: ``--pages`` pages linked from ``/`` (which never changes), each a Poisson process of
changes at one of the rates of ``MIX`` (shares of the pages); a page's version at time t is the
number of its changes by t, served with an ETag (and 304 to it). Over ``--days`` simulated days:

* fixed: a schedule that runs every ``--fixed-hours`` and fetches every page each run;
* adaptive: ``adaptive = true``, runs every ``--adaptive-hours`` (its ``min_interval``),
  ``max_interval`` = ``--max-days``; a run fetches only the pages that are due.

Prints the requests to pages each mode sent (counted at the server, robots.txt aside) and the
collection's freshness: the share of pages whose last fetched version is the live one, sampled
every simulated hour and averaged (Cho & Garcia-Molina's freshness), judged from the server's
own log of what it served, not from the crawler's figures.
"""

from __future__ import annotations

import bisect
import random
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import _util
import redis
from recrawl_site import run_at

from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis

HOUR = 3600.0
DAY = 24 * HOUR
T0 = 1_700_000_000.0
ADDRESS = "127.0.0.32"
#: (changes per second, share of the pages): hourly .. never.
MIX = [
    (1 / HOUR, 0.05),
    (1 / (6 * HOUR), 0.05),
    (1 / DAY, 0.10),
    (1 / (7 * DAY), 0.20),
    (1 / (30 * DAY), 0.20),
    (0.0, 0.40),
]


@dataclass
class SimSite:
    """Pages' change times (seconds after T0); the simulated now; what was served."""

    changes: list[list[float]]
    now: float = T0
    requests: int = 0
    #: page -> version last served (a 304 serves the version the client has)
    held: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def version(self, page: int, at: float) -> int:
        return bisect.bisect_right(self.changes[page], at - T0)

    def freshness(self, at: float) -> float:
        fresh = sum(self.held.get(i) == self.version(i, at) for i in range(len(self.changes)))
        return fresh / len(self.changes)


def build_site(pages: int, span: float, seed: int) -> SimSite:
    rng = random.Random(seed)
    changes: list[list[float]] = []
    for rate, share in MIX:
        for _ in range(round(pages * share)):
            times, t = [], 0.0
            while rate:
                t += rng.expovariate(rate)
                if t > span:
                    break
                times.append(t)
            changes.append(times)
    return SimSite(changes)


class Handler(BaseHTTPRequestHandler):
    site: SimSite

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        site = self.site
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

    def __init__(self, site: SimSite) -> None:
        handler = type("SimHandler", (Handler,), {"site": site})
        self.httpd = ThreadingHTTPServer((ADDRESS, 0), handler)
        self.netloc = f"{ADDRESS}:{self.httpd.server_address[1]}"
        self.base_url = f"http://{self.netloc}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def simulate(
    args: Any, settings: Any, client: Any, name: str, period: float, options: dict
) -> dict[str, Any]:
    span = args.days * DAY
    site = build_site(args.pages, span, args.seed)
    server = Server(site)
    runs = [T0 + k * period for k in range(int(span / period))]
    samples, run_index, not_due = [], 0, 0
    try:
        for hour in range(int(span / HOUR)):
            at = T0 + hour * HOUR
            while run_index < len(runs) and runs[run_index] <= at:
                site.now = runs[run_index]
                crawl = run_at(settings, client, server, site.now, schedule=name, **options)
                not_due += crawl.stats.counters().get("not_due", 0)
                run_index += 1
            samples.append(site.freshness(at))
    finally:
        server.httpd.shutdown()
    return {
        "mode": name,
        "runs": len(runs),
        "requests": site.requests,
        "not_due": not_due,
        "freshness": sum(samples) / len(samples),
    }


def measure(args: Any) -> dict[str, Any]:
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-adaptive-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        with local_workers(url, log_dir=tmp, fetchers=1):
            fixed = simulate(args, settings, client, "fixed", args.fixed_hours * HOUR, {})
            adaptive = simulate(
                args,
                settings,
                client,
                "adaptive",
                args.adaptive_hours * HOUR,
                {
                    "adaptive": True,
                    "min_interval": args.adaptive_hours * HOUR,
                    "max_interval": args.max_days * DAY,
                },
            )
        client.close()
    return {
        "pages": args.pages,
        "days": args.days,
        "modes": [fixed, adaptive],
        "fewer_requests": 1 - adaptive["requests"] / fixed["requests"],
        "freshness_gain": adaptive["freshness"] - fixed["freshness"],
    }


def main() -> int:
    ap = _util.parser(__doc__)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--days", type=float, default=10, help="simulated days (10 fixed runs)")
    ap.add_argument("--fixed-hours", type=float, default=24)
    ap.add_argument("--adaptive-hours", type=float, default=12)
    ap.add_argument("--max-days", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    result = measure(args)
    figures = {k: v for k, v in result.items() if k != "modes"}
    tables = [
        _util.table("Requests and freshness per mode", result["modes"]),
        _util.table("Adaptive against fixed", [figures]),
    ]
    _util.emit(args, result, tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
