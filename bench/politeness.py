"""Politeness benchmark: how closely the cluster keeps each host's pace, and how much of that
pace it uses.

    .venv/bin/python bench/politeness.py                 # every scenario, as a table
    .venv/bin/python bench/politeness.py --json          # the same figures as JSON
    .venv/bin/python bench/politeness.py --only crawl-delay --repeat 3
    .venv/bin/python bench/politeness.py --only 3x2 --timeline   # + every request's time

Starts a private ``redis-server`` and real worker processes (``crawler_tasks.surface.embedded``), serves
synthetic sites on 127.0.0.x (``tests/support/sitegen.py``) and measures from the servers' own
request logs, robots.txt requests included (they load the server like any other request):

* politeness error = the most requests seen in any 1-s sliding window / the most the policy
  allows in 1 s. For a token bucket that is ``rate + burst`` (a full bucket plus what refills
  in the window); for a ``Crawl-delay`` of d >= 1 s it is 1 request, counted over page requests
  (robots.txt is how the delay becomes known, so the first page follows it at once). <= 1.00
  is polite;
* efficiency = achieved requests/s over the steady middle of the crawl (the first and last 15 %
  of its span dropped, a whole number of intervals counted) / the allowed requests/s. For one
  host: the span a perfectly paced crawl needs for the same requests / the measured span
  (first to last request), e.g. N pages + robots.txt at r req/s: (N / r) / span.

Scenarios (all ``concurrency=1`` per host, ``CRAWLER_*`` settings at their defaults):

* ``3x2``: 3 hosts at 2 req/s, burst 1, TWO fetch worker processes (each with its dispatcher);
* ``crawl-delay``: 1 host whose robots.txt says ``Crawl-delay: 2`` (crawl rate 10 req/s);
* ``1x5``: 1 host, 30 pages at 5 req/s (target: span within 10 % of N/r);
* ``20x1``: 20 hosts (127.0.0.10..29) at 1 req/s, 12 pages each.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import _util  # also puts the checkout on sys.path (tests.support)

from crawler_tasks import start_crawl
from crawler_tasks.settings import Settings, load
from crawler_tasks.surface.embedded import local_workers, private_redis
from crawler_tasks.worker.process.app import make_app
from tests.support.sitegen import Request, max_concurrency, rate_report, running_sites

#: Fraction of the crawl's span dropped at each end when measuring the steady pace.
EDGE = 0.15


@dataclass
class Scenario:
    name: str
    addresses: list[str]
    pages: int  # per host
    rate: float
    burst: int = 1
    fetch_processes: int = 1
    fetch_threads: int = 8
    crawl_delay: float = 0.0
    links_per_page: int = 4
    notes: str = ""

    @property
    def interval(self) -> float:
        return max(1 / self.rate, self.crawl_delay)

    @property
    def allowed_in_window(self) -> float:
        """Most requests the policy allows in any 1-s window."""
        if self.crawl_delay >= 1 / self.rate:
            return float(math.ceil(1 / self.crawl_delay))
        return self.rate + self.burst


SCENARIOS = [
    Scenario(
        "3x2",
        ["127.0.0.2", "127.0.0.3", "127.0.0.4"],
        20,
        2.0,
        fetch_processes=2,
        notes="3 hosts x 2 req/s, burst 1, 2 fetch processes",
    ),
    Scenario(
        "crawl-delay",
        ["127.0.0.5"],
        8,
        10.0,
        crawl_delay=2.0,
        notes="robots.txt Crawl-delay: 2, crawl rate 10 req/s",
    ),
    Scenario("1x5", ["127.0.0.6"], 30, 5.0, notes="1 host, 30 pages at 5 req/s"),
    Scenario(
        "20x1",
        [f"127.0.0.{i}" for i in range(10, 30)],
        12,
        1.0,
        notes="20 hosts x 1 req/s, 12 pages each",
    ),
]


@dataclass
class HostResult:
    host: str
    requests: int
    max_in_1s: int
    allowed_in_1s: float
    politeness_error: float
    min_gap_s: float
    max_concurrency: int
    mean_rate: float


@dataclass
class Result:
    scenario: str
    notes: str
    pages: int
    crawl_s: float
    allowed_rate: float
    achieved_rate: float
    efficiency: float
    politeness_error: float
    span_s: float
    ideal_span_s: float
    hosts: list[HostResult] = field(default_factory=list)
    timeline: dict[str, list[str]] = field(default_factory=dict)


def counted_requests(sc: Scenario, log: list[Request]) -> list[Request]:
    """Every request, but robots.txt under a Crawl-delay (it is how the delay is learnt)."""
    return [e for e in log if not (sc.crawl_delay and e.path == "/robots.txt")]


def steady_rate(times: list[float], interval: float) -> float:
    """Requests/s in the middle of the span (first and last EDGE dropped), counted over a
    whole number of intervals: hosts started together stay in phase, and a window cut
    mid-cycle would count one cycle too many or too few."""
    times = sorted(times)
    lo, hi = times[0], times[-1]
    start = lo + EDGE * (hi - lo)
    length = math.floor((1 - 2 * EDGE) * (hi - lo) / interval) * interval
    if length <= 0:
        return 0.0
    return sum(start <= t < start + length for t in times) / length


def host_result(sc: Scenario, host: str, log: list[Request]) -> HostResult:
    report = rate_report(counted_requests(sc, log))
    return HostResult(
        host=host,
        requests=len(log),
        max_in_1s=report["max_in_window"],
        allowed_in_1s=sc.allowed_in_window,
        politeness_error=report["max_in_window"] / sc.allowed_in_window,
        min_gap_s=report["min_interval"],
        max_concurrency=max_concurrency(log),
        mean_rate=report["mean_rate"],
    )


def wait_for_workers(settings: Settings, count: int, timeout: float = 60.0) -> None:
    app = make_app(settings)
    deadline = time.monotonic() + timeout
    while len(app.control.ping(timeout=0.5) or []) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} workers answer")


def run(sc: Scenario, broker: str, tmp: Path, timeline: bool = False) -> Result:
    tmp.mkdir(parents=True, exist_ok=True)
    settings = load(env={}, broker_url=broker, output_dir=str(tmp / "out"))
    robots = f"User-agent: *\nCrawl-delay: {sc.crawl_delay:g}\n" if sc.crawl_delay else None
    with contextlib.ExitStack() as stack:
        for _ in range(sc.fetch_processes):
            stack.enter_context(
                local_workers(
                    broker, broker, fetch_threads=sc.fetch_threads, parsers=1, log_dir=str(tmp)
                )
            )
        wait_for_workers(settings, 2 * sc.fetch_processes)
        _graph, servers = stack.enter_context(
            running_sites(
                sc.addresses,
                sc.pages,
                sc.links_per_page,
                broken_ratio=0,
                non_html_ratio=0,
                cross_host_ratio=0,
                robots_txt=robots,
            )
        )
        crawl = start_crawl(
            [s.base_url + "/" for s in servers],
            settings=settings,
            allow_private_networks=True,
            rate=sc.rate,
            burst=sc.burst,
            concurrency=1,
        )
        summary = crawl.wait(timeout=600)
        logs = {s.address: s.requests() for s in servers}
    hosts = [host_result(sc, h, log) for h, log in logs.items()]
    counted = sorted(e.time for log in logs.values() for e in counted_requests(sc, log))
    span = counted[-1] - counted[0]
    if len(servers) > 1:
        allowed = len(servers) / sc.interval
        achieved = steady_rate(counted, sc.interval)
        ideal = math.nan
        efficiency = achieved / allowed
    else:
        # One host: a perfectly paced crawl puts one interval between consecutive counted
        # requests (N pages + robots.txt at r req/s: N / r).
        allowed = 1 / sc.interval
        achieved = (len(counted) - 1) / span
        ideal = (len(counted) - 1) * sc.interval
        efficiency = ideal / span
    t0 = min(e.time for log in logs.values() for e in log)
    return Result(
        scenario=sc.name,
        notes=sc.notes,
        pages=summary["counters"].get("done", 0),
        crawl_s=summary["duration_s"],
        allowed_rate=allowed,
        achieved_rate=achieved,
        efficiency=efficiency,
        politeness_error=max(h.politeness_error for h in hosts),
        span_s=span,
        ideal_span_s=ideal,
        hosts=hosts,
        timeline={
            h: [f"{e.time - t0:.3f}{' robots' if e.path == '/robots.txt' else ''}" for e in log]
            for h, log in logs.items()
        }
        if timeline
        else {},
    )


def main(argv: list[str] | None = None) -> int:
    parser = _util.parser(__doc__)
    parser.add_argument(
        "--only",
        action="append",
        choices=[s.name for s in SCENARIOS],
        help="run only this scenario (repeatable)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario")
    parser.add_argument("--timeline", action="store_true", help="every request's time too")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    results: list[Result] = []
    with private_redis() as broker, tempfile.TemporaryDirectory(prefix="bench-polite-") as tmp:
        for sc in chosen:
            for i in range(args.repeat):
                _util.log(args, f"{sc.name} run {i + 1}: {sc.notes}")
                results.append(run(sc, broker, Path(tmp) / f"{sc.name}-{i}", args.timeline))
    _util.emit(args, {"scenarios": [asdict(r) for r in results]}, tables(results, args))
    return 0


def tables(results: list[Result], args: argparse.Namespace) -> list[str]:
    summary = [
        {
            "scenario": r.scenario,
            "pages": r.pages,
            "crawl s": r.crawl_s,
            "allowed req/s": r.allowed_rate,
            "achieved req/s": r.achieved_rate,
            "efficiency": r.efficiency,
            "politeness error": r.politeness_error,
            "span s": r.span_s,
            "ideal span s": r.ideal_span_s,
            "notes": r.notes,
        }
        for r in results
    ]
    hosts = [
        {"scenario": r.scenario, **{k.replace("_", " "): v for k, v in asdict(h).items()}}
        for r in results
        for h in r.hosts
    ]
    out = [
        _util.table("Politeness and efficiency per scenario", summary),
        _util.table("Per host (politeness error = max in 1 s / allowed in 1 s)", hosts),
    ]
    if args.repeat > 1:
        worst = []
        for name in dict.fromkeys(r.scenario for r in results):
            runs = [r for r in results if r.scenario == name]
            worst.append(
                {
                    "scenario": name,
                    "runs": len(runs),
                    "worst politeness error": max(r.politeness_error for r in runs),
                    "median efficiency": statistics.median(r.efficiency for r in runs),
                    "min efficiency": min(r.efficiency for r in runs),
                }
            )
        out.append(_util.table("Over the runs", worst))
    for r in results:
        for host, times in r.timeline.items():
            out.append(f"{r.scenario} {host}: " + " ".join(times))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
