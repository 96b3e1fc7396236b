"""Politeness benchmark: how closely the cluster keeps each host's pace, and how much of that
pace it uses.

    .venv/bin/python bench/politeness.py                 # every scenario, as a table
    .venv/bin/python bench/politeness.py --json          # the same figures as JSON
    .venv/bin/python bench/politeness.py --only crawl-delay --repeat 3

Starts a private ``redis-server`` and real worker processes (``crawler_tasks.embedded``), serves
synthetic sites on 127.0.0.x (``tests/sitegen.py``) and measures from the servers' own request
logs, robots.txt requests included (they load the server like any other request):

* politeness error = the most requests seen in any 1-s sliding window / the most the policy
  allows in 1 s. For a token bucket that is ``rate + burst`` (a full bucket plus what refills
  in the window); for a ``Crawl-delay`` of d >= 1 s it is 1 request, counted over page requests
  (robots.txt is how the delay becomes known, so the first page follows it at once). <= 1.00
  is polite;
* efficiency = achieved requests/s over the steady middle of the crawl (the first and last 15 %
  of its span dropped) / the allowed requests/s. For one host that is (requests - 1) / span.

Scenarios (all ``concurrency=1`` per host, ``CRAWLER_*`` settings at their defaults):

* ``3x2``: 3 hosts at 2 req/s, burst 1, TWO fetch worker processes (each with its dispatcher);
* ``crawl-delay``: 1 host whose robots.txt says ``Crawl-delay: 2`` (crawl rate 10 req/s);
* ``1x5``: 1 host, 30 pages at 5 req/s (target: span within 10 % of N/r);
* ``20x1``: 20 hosts (127.0.0.10..29) at 1 req/s, 12 pages each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sitegen import Request, max_concurrency, rate_report, running_sites  # noqa: E402

from crawler_tasks import start_crawl  # noqa: E402
from crawler_tasks.embedded import local_workers, private_redis  # noqa: E402
from crawler_tasks.settings import load  # noqa: E402

#: Fraction of the crawl's span dropped at each end when measuring the steady pace.
EDGE = 0.15


@dataclass
class Scenario:
    name: str
    addresses: list[str]
    pages: int
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
    Scenario("3x2", ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 20, 2.0, fetch_processes=2,
             notes="3 hosts x 2 req/s, burst 1, 2 fetch processes"),
    Scenario("crawl-delay", ["127.0.0.5"], 8, 10.0, crawl_delay=2.0,
             notes="robots.txt Crawl-delay: 2, crawl rate 10 req/s"),
    Scenario("1x5", ["127.0.0.6"], 30, 5.0, notes="1 host, 30 pages at 5 req/s"),
    Scenario("20x1", [f"127.0.0.{i}" for i in range(10, 30)], 12, 1.0,
             notes="20 hosts x 1 req/s, 12 pages each"),
]


@dataclass
class HostResult:
    host: str
    requests: int
    max_in_window: int
    allowed_in_window: float
    politeness_error: float
    min_gap: float
    max_concurrency: int
    rate: float
    efficiency: float


@dataclass
class Result:
    scenario: str
    notes: str
    duration: float
    pages: int
    allowed_rate: float
    steady_rate: float
    efficiency: float
    politeness_error: float
    span_vs_ideal: float
    hosts: list[HostResult] = field(default_factory=list)


def steady_rate(times: list[float]) -> float:
    """Requests/s between the first and last EDGE of the span (all hosts together)."""
    times = sorted(times)
    if len(times) < 3:
        return 0.0
    lo, hi = times[0], times[-1]
    a, b = lo + EDGE * (hi - lo), hi - EDGE * (hi - lo)
    inside = [t for t in times if a <= t <= b]
    return (len(inside) - 1) / (inside[-1] - inside[0]) if len(inside) > 1 else 0.0


def host_result(sc: Scenario, host: str, log: list[Request]) -> HostResult:
    counted = [e for e in log if not (sc.crawl_delay and e.path == "/robots.txt")]
    report = rate_report(counted)
    whole = rate_report(log)
    rate = whole["mean_rate"]
    return HostResult(
        host=host,
        requests=len(log),
        max_in_window=report["max_in_window"],
        allowed_in_window=sc.allowed_in_window,
        politeness_error=report["max_in_window"] / sc.allowed_in_window,
        min_gap=report["min_interval"],
        max_concurrency=max_concurrency(log),
        rate=rate,
        efficiency=rate * sc.interval,
    )


def run(sc: Scenario, broker: str, tmp: Path) -> Result:
    tmp.mkdir(parents=True, exist_ok=True)
    settings = load(env={}, broker_url=broker, output_dir=str(tmp / "out"))
    robots = f"User-agent: *\nCrawl-delay: {sc.crawl_delay:g}\n" if sc.crawl_delay else None
    with contextlib.ExitStack() as stack:
        for i in range(sc.fetch_processes):
            stack.enter_context(local_workers(broker, fetch_threads=sc.fetch_threads, parsers=1,
                                              log_dir=str(tmp)))
            del i
        time.sleep(2.0)  # let every worker connect before the crawl starts
        _graph, servers = stack.enter_context(running_sites(
            sc.addresses, sc.pages, sc.links_per_page, broken_ratio=0, non_html_ratio=0,
            cross_host_ratio=0, robots_txt=robots))
        crawl = start_crawl([s.base_url + "/" for s in servers], settings=settings,
                            allow_private_networks=True, rate=sc.rate, burst=sc.burst,
                            concurrency=1)
        summary = crawl.wait(timeout=float(__import__("os").environ.get("BENCH_TIMEOUT", "600")))
        logs = {s.address: s.requests() for s in servers}
    if __import__("os").environ.get("BENCH_DUMP"):
        t0 = min(e.time for log in logs.values() for e in log)
        for h, log in logs.items():
            print(h, " ".join(f"{e.time - t0:.3f}{'R' if e.path == '/robots.txt' else ''}" for e in log))
    hosts = [host_result(sc, h, log) for h, log in logs.items()]
    times = [e.time for log in logs.values() for e in log]
    allowed = len(servers) / sc.interval
    steady = steady_rate(times) if len(servers) > 1 else hosts[0].rate
    ideal = sc.pages / sc.rate if sc.crawl_delay == 0 else sc.pages * sc.interval
    span = max(times) - min(times)
    return Result(
        scenario=sc.name,
        notes=sc.notes,
        duration=summary["duration_s"],
        pages=summary["counters"].get("done", 0),
        allowed_rate=allowed,
        steady_rate=steady,
        efficiency=steady / allowed,
        politeness_error=max(h.politeness_error for h in hosts),
        span_vs_ideal=span / ideal - 1 if len(servers) == 1 else float("nan"),
        hosts=hosts,
    )


def print_table(results: list[Result]) -> None:
    print(f"{'scenario':<12} {'host':<10} {'reqs':>4} {'max/1s':>6} {'allowed':>7} "
          f"{'error':>6} {'min gap':>7} {'conc':>4} {'req/s':>6} {'effic.':>6}")
    for r in results:
        for h in r.hosts:
            print(f"{r.scenario:<12} {h.host:<10} {h.requests:>4} {h.max_in_window:>6} "
                  f"{h.allowed_in_window:>7g} {h.politeness_error:>6.2f} {h.min_gap:>7.3f} "
                  f"{h.max_concurrency:>4} {h.rate:>6.2f} {h.efficiency:>6.2f}")
    print()
    print(f"{'scenario':<12} {'pages':>5} {'secs':>6} {'allowed/s':>9} {'steady/s':>8} "
          f"{'effic.':>6} {'polit.err':>9} {'span-ideal':>10}  notes")
    for r in results:
        span = "" if math.isnan(r.span_vs_ideal) else f"{r.span_vs_ideal:+.1%}"
        print(f"{r.scenario:<12} {r.pages:>5} {r.duration:>6.1f} {r.allowed_rate:>9.2f} "
              f"{r.steady_rate:>8.2f} {r.efficiency:>6.2f} {r.politeness_error:>9.2f} "
              f"{span:>10}  {r.notes}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--only", action="append", choices=[s.name for s in SCENARIOS],
                        help="run only this scenario (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each scenario")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    results: list[Result] = []
    with private_redis() as broker, tempfile.TemporaryDirectory(prefix="bench-polite-") as tmp:
        for sc in chosen:
            for i in range(args.repeat):
                results.append(run(sc, broker, Path(tmp) / f"{sc.name}-{i}"))
                if not args.json:
                    print(f"# {sc.name} run {i + 1}: error {results[-1].politeness_error:.2f} "
                          f"efficiency {results[-1].efficiency:.2f}", file=sys.stderr)
    if args.json:
        print(json.dumps([_jsonable(r) for r in results], indent=2))
    else:
        print_table(results)
        if args.repeat > 1:
            for sc in chosen:
                runs = [r for r in results if r.scenario == sc.name]
                print(f"{sc.name}: worst error {max(r.politeness_error for r in runs):.2f}, "
                      f"median efficiency {statistics.median(r.efficiency for r in runs):.2f}")
    return 0


def _jsonable(r: Result) -> dict[str, Any]:
    out = {k: v for k, v in vars(r).items() if k != "hosts"}
    out["span_vs_ideal"] = None if math.isnan(r.span_vs_ideal) else r.span_vs_ideal
    out["hosts"] = [vars(h) for h in r.hosts]
    return out


if __name__ == "__main__":
    sys.exit(main())
