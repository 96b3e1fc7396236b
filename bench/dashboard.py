"""Dashboard benchmark: API latency with 50 crawls and one of 100,000 hosts, and the Redis CPU
the dashboard adds while it is open on a running broad crawl.

    .venv/bin/python bench/dashboard.py                  # both parts (about 3 minutes)
    .venv/bin/python bench/dashboard.py --hosts 20000 --broad-hosts 50 --broad-pages 5

Each part uses its own private ``redis-server`` (never the one on port 6379).

1. Latency: 49 small crawls (3 seeds each) and one broad crawl of ``--hosts`` hosts are
   seeded through the real admission path (``start_crawl``, ``Frontier.admit``, 10,000 URLs a
   call, one URL per host); every tenth host gets politeness state written as done.lua
   writes it (a Crawl-delay, connection failures, a third of those down). No workers: the
   URLs stay pending, the table holds every host. A ``crawler dashboard`` process is started
   and each API call is timed ``--repeat`` times (median, max), the host table cold (its
   first read of the crawl's hosts) and warm (its snapshot), sorted by each column and paged
   to the end. Target: < 300 ms per call.
2. Redis CPU (``--broad-hosts``, 0 skips): bench/broad.py's polite run (1 req/s per host)
   twice, alternating, without and with a dashboard open: a client polling as the crawl page
   does (its data every 3 s, its host table every 6 s). Reported: Redis CPU
   (``used_cpu_user + used_cpu_sys``) per page and in total, and the difference. Target:
   < 2 % more. Run repeats alternate so that drift of the machine hits both sides; as runs
   differ by more than 2 % among themselves on a shared machine, the dashboard's own Redis
   CPU is also measured apart (a pending crawl of the same hosts, no workers: Redis CPU per
   second polled minus idle) and set against the crawl's Redis CPU per second.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import _util
import broad
import requests

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import free_port, private_redis, stop_process
from tests.support.waiting import wait_until


@contextlib.contextmanager
def dashboard(broker: str) -> Iterator[str]:
    """A ``crawler dashboard`` process on loopback (no auth); yields its base URL."""
    port = free_port()
    env = {**os.environ, "CRAWLER_BROKER_URL": broker}
    env.pop("CRAWLER_DASHBOARD_AUTH", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "dashboard", "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(base + "/api/crawls") is not None, timeout=30)
        yield base
    finally:
        stop_process(proc)


def _get(url: str) -> Any:
    try:
        r = requests.get(url, timeout=30)
        return r.json() if r.ok else None
    except requests.RequestException:
        return None


def seed(broker: str, hosts: int, small: int) -> str:
    """``small`` crawls of 3 seeds and one of ``hosts`` hosts; returns the big one's id."""
    settings = load(env={}, broker_url=broker)
    for i in range(small):
        start_crawl([f"http://s{i}-{j}.test/" for j in range(3)], settings=settings)
    crawl = start_crawl(["http://h0.test/"], settings=settings, max_depth=0)
    store = crawl.store
    for lo in range(1, hosts, 10_000):
        store.frontier.admit((f"http://h{i}.test/", 0) for i in range(lo, min(hosts, lo + 10_000)))
    pipe = crawl.client.pipeline(transaction=False)
    now = time.time()
    for i in range(0, hosts, 10):
        state = {"delay": repr(float(i % 7)), "fails": str(i % 4), "slow": "1.0"}
        if i % 30 == 0:
            state.update(fails="3", down_since=repr(now - 60), not_before=repr(now + 5))
        pipe.hset(store.ck.domain(f"h{i}.test"), mapping=state)
    pipe.execute()
    return crawl.id


def timed(url: str, repeat: int) -> dict[str, Any]:
    times, body = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        r = requests.get(url, timeout=60)
        times.append((time.perf_counter() - t) * 1000)
        r.raise_for_status()
        body = r.json()
    return {"median_ms": statistics.median(times), "max_ms": max(times), "body": body}


def latency(args: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with private_redis() as url:
        t = time.perf_counter()
        big = seed(url, args.hosts, args.crawls - 1)
        _util.log(
            args,
            f"seeded {args.crawls} crawls, {args.hosts:,} hosts in {time.perf_counter() - t:.1f} s",
        )
        with dashboard(url) as base:
            hosts = f"{base}/api/crawls/{big}/hosts"
            rows.append(cold(hosts + "?limit=50", args.hosts))
            calls = [
                ("hosts, warm, by backlog", hosts + "?limit=50", args.repeat),
                ("/api/crawls (50 crawls)", f"{base}/api/crawls", args.repeat),
                ("/api/crawls/ID (status --json figures)", f"{base}/api/crawls/{big}", args.repeat),
                ("/api/crawls/ID/page", f"{base}/api/crawls/{big}/page", args.repeat),
            ]
            for key in ("in_flight", "rate", "crawl_delay", "state", "fails", "domain"):
                calls.append((f"hosts by {key}", f"{hosts}?sort={key}&limit=50", args.repeat))
            calls.append(
                ("hosts, last page", f"{hosts}?offset={args.hosts - 50}&limit=50", args.repeat)
            )
            calls.append(("hosts, ascending backlog", f"{hosts}?desc=0&limit=50", args.repeat))
            for name, call, repeat in calls:
                r = timed(call, repeat)
                row = {"call": name, "median_ms": r["median_ms"], "max_ms": r["max_ms"]}
                if "/hosts" in call:
                    row["rows_total"] = r["body"]["total"]
                    row["snapshot_read_s"] = r["body"]["read_s"]
                rows.append(row)
    return rows


def cold(url: str, hosts: int) -> dict[str, Any]:
    """The first request for the host table (answers ``reading`` when the first read takes
    longer than COLD_WAIT), then the time until the whole table is there."""
    t = time.perf_counter()
    first = timed(url, 1)
    while (body := requests.get(url, timeout=60).json())["reading"]:
        time.sleep(0.05)
    return {
        "call": f"hosts, cold (first read of {hosts:,} hosts)",
        "median_ms": first["median_ms"],
        "max_ms": first["max_ms"],
        "rows_total": body["total"],
        "snapshot_read_s": body["read_s"],
        "first_table_after_s": time.perf_counter() - t,
    }


class Poller:
    """What a browser with the crawl page open asks (dashboard.js): the crawl page's data
    every 3 s, its host table every 6 s (the crawl found in the crawls list once)."""

    def __init__(self, base: str) -> None:
        self.base, self.calls = base, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        crawl_id, tick = None, 0
        while not self._stop.wait(0 if tick == 0 else 3.0):
            if crawl_id is None:
                listed = (_get(self.base + "/api/crawls") or {"crawls": []})["crawls"]
                crawl_id = listed[0]["crawl_id"] if listed else None
                self.calls += 1
            if crawl_id is not None:
                _get(f"{self.base}/api/crawls/{crawl_id}/page")
                if tick % 2 == 0:
                    _get(f"{self.base}/api/crawls/{crawl_id}/hosts?limit=50")
                self.calls += 1
            tick += 1


def broad_cpu(args: Any) -> list[dict[str, Any]]:
    """broad.run_ours, its Redis wrapped so a dashboard and a poller run beside the crawl."""
    plain = broad.redis_for
    polls: list[int] = []

    @contextlib.contextmanager
    def with_dashboard(state: str) -> Iterator[Any]:
        with plain(state) as got, dashboard(got[0]) as base, Poller(base) as poller:
            yield got
        polls.append(poller.calls)

    ns = type("Args", (), {})()
    ns.hosts, ns.pages, ns.keep, ns.events, ns.timeout = (
        args.broad_hosts,
        args.broad_pages,
        None,
        False,
        300.0,
    )
    ns.latency, ns.worker_env, ns.fast_conn = (0.05, 0.35), {}, 4
    rows = []
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-dash-") as tmp:
        web = broad.Web(ns, tmp)
        try:
            for i in range(args.broad_repeat * 2):
                open_ = i % 2 == 1
                broad.redis_for = with_dashboard if open_ else plain
                _util.log(args, f"broad crawl {i + 1}: dashboard {'open' if open_ else 'closed'}")
                r = broad.run_ours(ns, web, "polite", args.broad_layout)
                rows.append(
                    {
                        "dashboard": "open" if open_ else "closed",
                        "pages": r.get("pages"),
                        "wall_s": r["wall_s"],
                        "redis_cpu_s": r["redis_cpu_ms_per_page"]
                        * max(r.get("pages", 0), 1)
                        / 1000,
                        "redis_cpu_ms_per_page": r["redis_cpu_ms_per_page"],
                        "redis_cmds_per_page": r["redis_cmds_per_page"],
                        "status": r["status"],
                        "polls": polls[-1] if open_ else 0,
                    }
                )
        finally:
            broad.redis_for = plain
            web.close()
    return rows


def isolated(args: Any) -> dict[str, Any]:
    """The dashboard's own Redis CPU, apart from any crawl's: a crawl of ``--broad-hosts``
    hosts x ``--broad-pages`` URLs pending (no workers: nothing else runs), Redis CPU over
    ``--window`` s with nobody looking, then over ``--window`` s with the poller."""
    import redis
    from crawl import redis_cpu

    with private_redis() as url:
        settings = load(env={}, broker_url=url)
        seeds = [f"http://b{i}.test/" for i in range(args.broad_hosts)]
        crawl = start_crawl(seeds, settings=settings)
        crawl.store.frontier.admit(
            (f"http://b{i}.test/p{j}", 1)
            for i in range(args.broad_hosts)
            for j in range(args.broad_pages)
        )
        client = redis.Redis.from_url(url)

        def window(poll: bool) -> tuple[float, int]:
            with dashboard(url) as base:
                time.sleep(1.0)
                client.config_resetstat()
                c0 = redis_cpu(client)
                with Poller(base) if poll else contextlib.nullcontext():  # type: ignore[attr-defined]
                    time.sleep(args.window)
                calls = sum(v["calls"] for v in client.info("commandstats").values())
                return redis_cpu(client) - c0, calls

        idle, idle_calls = window(False)
        busy, busy_calls = window(True)
    return {
        "window_s": args.window,
        "idle_cpu_ms_per_s": idle / args.window * 1000,
        "polled_cpu_ms_per_s": busy / args.window * 1000,
        "dashboard_cpu_ms_per_s": (busy - idle) / args.window * 1000,
        "dashboard_cmds_per_s": (busy_calls - idle_calls) / args.window,
    }


def summarize(rows: list[dict[str, Any]], alone: dict[str, Any]) -> dict[str, Any]:
    closed = [r for r in rows if r["dashboard"] == "closed"]
    opened = [r for r in rows if r["dashboard"] == "open"]
    a = statistics.mean(r["redis_cpu_ms_per_page"] for r in closed)
    b = statistics.mean(r["redis_cpu_ms_per_page"] for r in opened)
    crawl_ms_per_s = statistics.mean(r["redis_cpu_s"] / r["wall_s"] * 1000 for r in closed)
    return {
        "closed_ms_per_page": a,
        "open_ms_per_page": b,
        "added_percent_side_by_side": (b - a) / a * 100,
        "crawl_redis_cpu_ms_per_s": crawl_ms_per_s,
        "dashboard_redis_cpu_ms_per_s": alone["dashboard_cpu_ms_per_s"],
        "added_percent_isolated": alone["dashboard_cpu_ms_per_s"] / crawl_ms_per_s * 100,
    }


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--hosts", type=int, default=100_000, help="hosts of the big crawl")
    p.add_argument("--crawls", type=int, default=50, help="crawls in all")
    p.add_argument("--repeat", type=int, default=10, help="timed calls per API call")
    p.add_argument("--broad-hosts", type=int, default=200, help="0: skip the Redis CPU part")
    p.add_argument("--broad-pages", type=int, default=10)
    p.add_argument("--broad-repeat", type=int, default=2, help="pairs of runs")
    p.add_argument("--broad-layout", default="threads:256x1:1")
    p.add_argument("--window", type=float, default=20.0, help="seconds of each isolated window")
    args = p.parse_args()
    result: dict[str, Any] = {"latency": latency(args)}
    tables = [
        _util.table(
            f"API latency: {args.crawls} crawls, one of {args.hosts:,} hosts", result["latency"]
        )
    ]
    if args.broad_hosts:
        result["broad"] = broad_cpu(args)
        result["isolated"] = isolated(args)
        result["redis_cpu"] = summarize(result["broad"], result["isolated"])
        tables.append(
            _util.table("Redis CPU on a broad crawl, dashboard closed / open", result["broad"])
        )
        tables.append(
            _util.table(
                "The dashboard's own Redis CPU (pending crawl, no workers)", [result["isolated"]]
            )
        )
        tables.append(_util.table("Redis CPU the open dashboard added", [result["redis_cpu"]]))
    _util.emit(args, result, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
