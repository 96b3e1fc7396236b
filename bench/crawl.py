"""Crawl benchmark: pages/s on a link-dense local site, our crawler vs Scrapy vs a plain loop.

    .venv/bin/python bench/crawl.py                  # tables (about 3.5 minutes on 2 cores)
    .venv/bin/python bench/crawl.py --json           # the same figures as JSON
    .venv/bin/python bench/crawl.py --layouts 16:1,16:2   # compare layouts (+1 minute)
    .venv/bin/python bench/crawl.py --profile /tmp/prof   # + py-spy profiles of the workers

(Scrapy must be installed: ``.venv/bin/pip install scrapy``; without it that row is skipped.)

The site: one host on 127.0.0.2 (tests/support/sitegen.py), ``--pages`` HTML pages (default 5,000)
with ``nav_links=150`` (the same 150-link sidebar on every page) + ``links_per_page=30``,
so ~180 links per page, plus the generator's 404 targets and non-HTML files. Served from
this process by sitegen's threaded server, pre-rendered.

Each crawler runs against the same server, one after the other, and is judged from the
server's own request log the same way: pages/s = GET requests for HTML pages / (last request
arrival - first request arrival); plus the total requests, duplicates, and URLs fetched vs
the reachable set computed from the link graph (which our crawler must match exactly).

* ours: a private redis-server, ``local_workers`` (fetch in a threads pool, parse in
  prefork) for each ``--layouts`` entry ``THREADS:PARSERS`` (default 16:2),
  ``start_crawl(rate=inf, rates={host: inf}, concurrency=16)``; peak RSS of every worker
  process (psutil every 0.5 s, children included), CPU seconds per process and of Redis
  (``INFO cpu``), and Redis's busiest commands, to show where the time goes.
* scrapy: ``bench/_scrapy_spider.py`` (CrawlSpider, CONCURRENT_REQUESTS=16, robots obeyed,
  no delays, LOG_LEVEL=WARNING) as a subprocess.
* loop: ``bench/_bfs_crawler.py``, one requests.Session + lxml, breadth first, a set for
  dedupe, as a subprocess.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _util
import psutil
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from crawler_tasks.web.urls import normalize

HERE = Path(__file__).resolve().parent
ADDRESS = "127.0.0.2"


def judge(server: Any, graph: Any, expected: set[str]) -> dict[str, Any]:
    """Figures from the server's request log (everything since the last clear_log())."""
    log = [e for e in server.requests() if e.method == "GET"]
    if not log:
        return {"requests": 0}
    base = server.base_url
    html = 0
    paths: Counter[str] = Counter()
    for e in log:
        if e.path == "/robots.txt":
            continue
        paths[e.path] += 1
        page = graph.pages.get(base + e.path)
        if page is not None and page.is_html:
            html += 1
    first = min(e.time for e in log)
    last = max(e.time for e in log)
    span = last - first
    fetched = {normalize(base + p) for p in paths}
    return {
        "html_pages": html,
        "requests": len(log),
        "distinct_urls": len(paths),
        "duplicate_requests": sum(paths.values()) - len(paths),
        "expected_urls": len(expected),
        "missing": len(expected - fetched),
        "unexpected": len(fetched - expected),
        "span_s": span,
        "pages_per_s": html / span if span > 0 else math.nan,
        "requests_per_s": len(log) / span if span > 0 else math.nan,
    }


def wait_for_workers(client: redis.Redis, timeout: float = 60.0) -> None:
    """Until both workers declared their queues (kombu bindings), then a moment more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.exists("_kombu.binding.parse") and client.exists("_kombu.binding.crawl.low"):
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise TimeoutError("workers did not start")


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


def tree(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            out += [p.pid, *(c.pid for c in p.children(recursive=True))]
    return out


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def parse_layout(item: str) -> tuple[int, int, int]:
    """``THREADS[xFETCHERS]:PARSERS`` -> (threads, fetch processes, parse processes)."""
    fetch, _, parsers = item.partition(":")
    threads, _, fetchers = fetch.partition("x")
    return int(threads), int(fetchers or 1), int(parsers)


def run_ours(
    args: Any,
    server: Any,
    graph: Any,
    expected: set[str],
    threads: int,
    parsers: int,
    fetchers: int = 1,
) -> dict[str, Any]:
    host = ADDRESS
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-crawl-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        log_dir = Path(tmp) / "logs"
        log_dir.mkdir()
        with local_workers(
            url,
            url,
            fetch_threads=threads,
            parsers=parsers,
            log_dir=str(log_dir),
            extra_env=args.worker_env,
            fetchers=fetchers,
        ) as procs:
            wait_for_workers(client)
            roots = [p.pid for p in procs]
            server.clear_log()
            cpu0 = cpu_seconds(tree(roots))
            self0 = _self_cpu()
            rcpu0 = redis_cpu(client)
            client.config_resetstat()
            profilers = start_profilers(args, roots, f"ours-{threads}-{parsers}")
            t0 = time.monotonic()
            with _util.RssSampler(roots, interval=0.5) as rss:
                crawl = start_crawl(
                    [server.base_url + "/"],
                    settings=settings,
                    client=client,
                    output=tmp,
                    rates={host: math.inf},
                    allow_private_networks=True,
                    allowed_domains=[host],
                    rate=math.inf,
                    concurrency=args.concurrency,
                )
                try:
                    summary = crawl.wait(timeout=args.timeout)
                except TimeoutError:
                    summary = {"status": f"not finished after {args.timeout:.0f}s"}
                    crawl.cancel()
            wall = time.monotonic() - t0
            server_cpu = _self_cpu() - self0
            stop_profilers(profilers)
            all_pids = tree(roots)
            cpu1 = cpu_seconds(all_pids)
            rcpu = redis_cpu(client) - rcpu0
            cmdstats = client.info("commandstats")
            records = sum(1 for _ in crawl.pages())
            worker_errors = [
                f.name
                for f in log_dir.glob("*.log")
                if "Traceback" in f.read_text(errors="replace")
            ]
        client.close()
    figures = judge(server, graph, expected)
    top = sorted(
        ((k.removeprefix("cmdstat_"), v["usec"], v["calls"]) for k, v in cmdstats.items()),
        key=lambda x: -x[1],
    )[:6]
    html = max(figures.get("html_pages", 0), 1)
    cpu = {pid: cpu1[pid] - cpu0.get(pid, 0.0) for pid in cpu1}
    return {
        "crawler": f"ours {fetchers}x threads {threads} + prefork {parsers}",
        **figures,
        "wall_s": wall,
        "records_written": records,
        "status": summary.get("status"),
        "peak_rss_mb": {k: round(v / 2**20, 1) for k, v in sorted(rss.peak.items())},
        "cpu_s": {
            label: round(cpu.get(int(label.rsplit("[", 1)[1][:-1]), 0.0), 2)
            for label in sorted(rss.peak)
        },
        "worker_cpu_ms_per_page": sum(cpu.values()) / html * 1000,
        "redis_cpu_ms_per_page": rcpu / html * 1000,
        "server_cpu_ms_per_page": server_cpu / html * 1000,
        "redis_top_commands_ms_per_page": {
            name: round(usec / 1000 / html, 3) for name, usec, _ in top
        },
        "redis_calls_per_page": {
            k.removeprefix("cmdstat_"): round(v["calls"] / html, 2)
            for k, v in sorted(cmdstats.items(), key=lambda kv: -kv[1]["calls"])
        },
        "end_to_end_pages_per_s": figures.get("html_pages", 0) / wall,
        "worker_log_tracebacks": worker_errors,
    }


def start_profilers(args: Any, roots: list[int], tag: str) -> list[subprocess.Popen[bytes]]:
    if not args.profile:
        return []
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    pyspy = Path(sys.executable).with_name("py-spy")
    procs = []
    for pid in roots:
        cmdline = " ".join(psutil.Process(pid).cmdline())
        name = f"fetch-{pid}" if "crawl.high" in cmdline else f"parse-{pid}"
        procs.append(
            subprocess.Popen(
                [
                    str(pyspy),
                    "record",
                    "--pid",
                    str(pid),
                    "--subprocesses",
                    "--rate",
                    "100",
                    "--gil",  # the thread holding the GIL: where the CPU goes, waits apart
                    "--format",
                    "raw",
                    "--output",
                    str(out / f"{tag}-{name}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def stop_profilers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(2)  # SIGINT: py-spy writes its output and exits
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def run_subprocess(
    name: str, cmd: list[str], server: Any, graph: Any, expected: set[str], timeout: float
) -> dict[str, Any]:
    server.clear_log()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = _self_cpu()
    t0 = time.monotonic()
    # Output to a file, not a pipe: a chatty crawler must never block on a full pipe.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        try:
            ps = psutil.Process(proc.pid)
            while proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, ps.memory_info().rss)
                if time.monotonic() - t0 > timeout:
                    proc.kill()
                    break
                time.sleep(0.5)
        finally:
            proc.wait()
            out.seek(0)
            output = out.read().decode(errors="replace")
    wall = time.monotonic() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = _self_cpu() - self0
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    figures = judge(server, graph, expected)
    html = max(figures.get("html_pages", 0), 1)
    result = {
        "crawler": name,
        **figures,
        "wall_s": wall,
        "exit_code": proc.returncode,
        "end_to_end_pages_per_s": figures.get("html_pages", 0) / wall,
        "peak_rss_mb": round(peak / 2**20, 1),
        "cpu_ms_per_page": cpu / html * 1000,
        "server_cpu_ms_per_page": server_cpu / html * 1000,
    }
    if proc.returncode != 0:
        result["output_tail"] = output[-800:]
    return result


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--pages", type=int, default=5000)
    p.add_argument(
        "--layouts", default="16:2", help="THREADS[xFETCHERS]:PARSERS,... (e.g. 16:2,8x2:2)"
    )
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--timeout", type=float, default=240.0, help="per crawler, seconds")
    p.add_argument("--skip-scrapy", action="store_true")
    p.add_argument("--skip-loop", action="store_true")
    p.add_argument("--profile", help="directory for py-spy raw profiles of our workers")
    p.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for our workers (e.g. CRAWLER_DISPATCH_INTERVAL=0.02)",
    )
    args = p.parse_args()
    args.worker_env = dict(kv.split("=", 1) for kv in args.worker_env)
    layouts = [parse_layout(item) for item in args.layouts.split(",") if item]

    from tests.support.sitegen import reachable, running_sites

    rows: list[dict[str, Any]] = []
    _util.log(args, f"generating a {args.pages:,}-page site")
    with running_sites([ADDRESS], pages_per_host=args.pages, links_per_page=30, nav_links=150) as (
        graph,
        servers,
    ):
        server = servers[0]
        seed = server.base_url + "/"
        expected = {normalize(u) for u in reachable(graph, [seed])}
        html_pages = sum(1 for u in expected if graph.pages.get(u) and graph.pages[u].is_html)
        links = [
            len(graph.pages[u].links)
            for u in graph.urls_on(server.base_url)
            if graph.pages[u].is_html
        ]
        site = {
            "html_pages": html_pages,
            "reachable_urls": len(expected),
            "mean_links_per_page": sum(links) / len(links),
            "html_bytes_mean": sum(len(b) for s, b, _ in server._static.values() if s == 200)
            / max(len(server._static), 1),
        }
        for threads, fetchers, parsers in layouts:
            _util.log(args, f"ours: {fetchers} x threads {threads} + prefork {parsers}")
            rows.append(run_ours(args, server, graph, expected, threads, parsers, fetchers))
        with tempfile.TemporaryDirectory(prefix="bench-others-") as tmp:
            has_scrapy = (not args.skip_scrapy) and _importable("scrapy")
            if has_scrapy:
                _util.log(args, "scrapy")
                rows.append(
                    run_subprocess(
                        "scrapy (CrawlSpider, 16 concurrent)",
                        [
                            sys.executable,
                            str(HERE / "_scrapy_spider.py"),
                            seed,
                            str(Path(tmp) / "scrapy.jsonl"),
                            str(args.concurrency),
                        ],
                        server,
                        graph,
                        expected,
                        args.timeout,
                    )
                )
            elif not args.skip_scrapy:
                rows.append({"crawler": "scrapy", "error": "not installed (pip install scrapy)"})
            if not args.skip_loop:
                _util.log(args, "requests+lxml loop")
                rows.append(
                    run_subprocess(
                        "requests+lxml loop (1 process)",
                        [
                            sys.executable,
                            str(HERE / "_bfs_crawler.py"),
                            seed,
                            str(Path(tmp) / "loop.jsonl"),
                        ],
                        server,
                        graph,
                        expected,
                        args.timeout,
                    )
                )
    scrapy_rate = next(
        (r.get("pages_per_s") for r in rows if r["crawler"].startswith("scrapy")), None
    )
    scrapy_e2e = next(
        (r.get("end_to_end_pages_per_s") for r in rows if r["crawler"].startswith("scrapy")), None
    )
    for r in rows:
        if scrapy_rate and r.get("pages_per_s"):
            r["x_scrapy"] = r["pages_per_s"] / scrapy_rate
        if scrapy_e2e and r.get("end_to_end_pages_per_s"):
            r["x_scrapy_end_to_end"] = r["end_to_end_pages_per_s"] / scrapy_e2e
    result = {"site": site, "crawlers": rows, "cpus": os.cpu_count()}
    cols = [
        "crawler",
        "pages_per_s",
        "x_scrapy",
        "end_to_end_pages_per_s",
        "x_scrapy_end_to_end",
        "html_pages",
        "requests",
        "distinct_urls",
        "duplicate_requests",
        "expected_urls",
        "missing",
        "unexpected",
        "span_s",
        "wall_s",
    ]
    ours = [r for r in rows if r["crawler"].startswith("ours")]
    tables = [
        _util.table("Site", [site]),
        _util.table(f"Pages/s from the server's request log ({os.cpu_count()} CPUs)", rows, cols),
        _util.table(
            "Our crawler: peak RSS per worker process (MB) and CPU seconds",
            [
                {"layout": r["crawler"], "process": k, "peak_rss_mb": v, "cpu_s": r["cpu_s"].get(k)}
                for r in ours
                for k, v in r["peak_rss_mb"].items()
            ],
        ),
        _util.table(
            "Our crawler: where the CPU goes (ms per HTML page)",
            [
                {
                    "layout": r["crawler"],
                    "workers_cpu": r["worker_cpu_ms_per_page"],
                    "redis_cpu": r["redis_cpu_ms_per_page"],
                    "site_server_cpu": r["server_cpu_ms_per_page"],
                    **{
                        f"redis {k}": v
                        for k, v in list(r["redis_top_commands_ms_per_page"].items())[:4]
                    },
                }
                for r in ours
            ],
        ),
        _util.table(
            "Our crawler: Redis commands per HTML page (calls)",
            [
                {"layout": r["crawler"], **dict(list(r["redis_calls_per_page"].items())[:10])}
                for r in ours
            ],
        ),
        _util.table(
            "Others: peak RSS (MB) and CPU (ms per HTML page)",
            [
                {
                    "crawler": r["crawler"],
                    "peak_rss_mb": r.get("peak_rss_mb"),
                    "cpu_ms_per_page": r.get("cpu_ms_per_page"),
                    "site_server_cpu": r.get("server_cpu_ms_per_page"),
                    "exit_code": r.get("exit_code"),
                }
                for r in rows
                if r not in ours
            ],
        ),
    ]
    _util.emit(args, result, tables)
    exact = all(
        r.get("missing") == 0 and r.get("unexpected") == 0 and r.get("duplicate_requests") == 0
        for r in ours
    )
    return 0 if exact else 1


def _self_cpu() -> float:
    """CPU seconds of this process: the site server's threads, mostly."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
