"""Adaptive schedules (issue 35) against fixed-period runs, on a simulated site whose pages
change at rates from hourly to never, under a simulated clock driven through the real code:
each run is a real crawl (real workers, a real HTTP server on loopback) whose time is set with
``stores.start(at=...)``, the time its visits count as and due-ness is measured against.

The site: ``--pages`` pages linked from ``/`` (which never changes), each a Poisson process of
changes at one of the rates of ``MIX`` (shares of the pages); a page's version at time t is the
number of its changes by t, served with an ETag (and 304 to it). Measured over ``--days``
simulated days, after ``--warm-days`` of the adaptive schedule's runs (0: its first runs, with
nothing learnt yet; a fixed schedule fetches every page each run whatever it learnt, so its
figures need no warm-up):

* fixed: runs every ``--fixed-hours`` and fetches every page each run (the baseline);
* fixed-same-period: runs every ``--adaptive-hours``, every page each run: the most freshness
  any schedule run that often can have, as every skipped fetch can only leave a copy stale;
* adaptive: ``adaptive = true``, runs every ``--adaptive-hours`` (its ``min_interval``),
  ``max_interval`` = ``--max-days``; a run fetches only the pages that are due.

Prints the requests to pages each mode sent in the measured days (counted at the server,
robots.txt aside) and the collection's freshness: the share of pages whose last fetched
version is the live one, sampled every simulated hour and averaged (Cho & Garcia-Molina's
freshness), judged from the server's own log of what it served, not from the crawler's figures.
"""

from __future__ import annotations

import tempfile
from typing import Any

import _util
import redis

from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.support.recrawl_site import DAY, HOUR, T0, Server, build_site, run_at

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


def simulate(
    args: Any, settings: Any, client: Any, name: str, period: float, options: dict, warm: float
) -> dict[str, Any]:
    """Runs of schedule ``name`` every ``period`` from ``T0 + args.warm_days - warm`` on; the
    figures count the ``args.days`` after ``T0 + args.warm_days``."""
    start, span = args.warm_days * DAY, args.days * DAY
    site = build_site(args.pages, start + span, args.seed, MIX, sitemap=args.sitemap)
    server = Server(site, ADDRESS)
    first = T0 + start - warm
    runs = [first + k * period for k in range(int((warm + span) / period))]
    samples, run_index, not_due, requests = [], 0, 0, None
    try:
        for hour in range(int((warm + span) / HOUR)):
            at = first + hour * HOUR
            if requests is None and at >= T0 + start:
                requests = -site.requests  # the measured days start
            while run_index < len(runs) and runs[run_index] <= at:
                site.now = runs[run_index]
                crawl = run_at(settings, client, server, site.now, schedule=name, **options)
                if site.now >= T0 + start:
                    not_due += crawl.stats.counters().get("not_due", 0)
                run_index += 1
            if at >= T0 + start:
                samples.append(site.freshness(at))
    finally:
        server.httpd.shutdown()
    return {
        "mode": name,
        "period_h": period / HOUR,
        "runs": sum(t >= T0 + start for t in runs),
        "requests": (requests or 0) + site.requests,
        "not_due": not_due,
        "freshness": sum(samples) / len(samples),
    }


def measure(args: Any) -> dict[str, Any]:
    period = args.adaptive_hours * HOUR
    adaptive = {
        "sitemaps": args.sitemap,
        "adaptive": True,
        "min_interval": period,
        "max_interval": args.max_days * DAY,
    }
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-adaptive-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        with local_workers(url, url, log_dir=tmp, fetchers=1):
            maps = {"sitemaps": args.sitemap}
            fixed = simulate(args, settings, client, "fixed", args.fixed_hours * HOUR, maps, 0)
            same = simulate(args, settings, client, "fixed-same-period", period, maps, 0)
            warm = args.warm_days * DAY
            ours = simulate(args, settings, client, "adaptive", period, adaptive, warm)
        client.close()
    return {
        "pages": args.pages,
        "days": args.days,
        "warm_days": args.warm_days,
        "modes": [fixed, same, ours],
        "fewer_requests": 1 - ours["requests"] / fixed["requests"],
        "freshness_gain": ours["freshness"] - fixed["freshness"],
        "fewer_than_same_period": 1 - ours["requests"] / same["requests"],
        "gain_over_same_period": ours["freshness"] - same["freshness"],
    }


def main() -> int:
    ap = _util.parser(__doc__)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument(
        "--days", type=float, default=10, help="simulated days measured (10 fixed runs)"
    )
    ap.add_argument(
        "--warm-days",
        type=float,
        default=0,
        help="simulated days of adaptive runs before those measured (0: from its first run)",
    )
    ap.add_argument("--fixed-hours", type=float, default=24)
    ap.add_argument("--adaptive-hours", type=float, default=12)
    ap.add_argument("--max-days", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--sitemap", action="store_true", help="a sitemap with accurate lastmods (both modes)"
    )
    args = ap.parse_args()
    result = measure(args)
    figures = {k: v for k, v in result.items() if k != "modes"}
    tables = [
        _util.table("Requests and freshness per mode", result["modes"]),
        _util.table("Adaptive against fixed (and fixed at the same run period)", [figures]),
    ]
    _util.emit(args, result, tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
