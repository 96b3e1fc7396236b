"""Broad-crawl benchmark: many slow hosts, our crawler vs Scrapy side by side, in one run.

    .venv/bin/python bench/broad.py                          # 1,000 hosts x 21 pages, both modes
    .venv/bin/python bench/broad.py --hosts 200 --pages 20   # quick: ~2-3 minutes
    .venv/bin/python bench/broad.py --modes polite --layouts threads:16x2:2,threads:256x2:2
    .venv/bin/python bench/broad.py --https --real-sizes --hosts 200 --pages 41  # the real web

(Scrapy must be installed: ``.venv/bin/pip install -e '.[bench]'``; ``--skip-scrapy`` without.)

The web: ``bench/_broad_server.py`` in its own process (so its CPU is not ours), ``--hosts``
hosts on 127.10.x.y (Linux routes 127/8 to lo), ``--pages`` HTML pages each, 50-350 ms per
response (``--latency LOW,HIGH``), robots.txt per host disallowing ``/private/`` (every page
links there), each page linking to 2 pages of its host and 3 of other hosts. Seeds: every
host's root.

``--https``: every host serves HTTPS only, its certificate signed by a private CA made for the
run (``_tls.py``), which our crawler is given as ``CRAWLER_CA_BUNDLE`` (Scrapy does not verify
certificates by default, so it needs nothing). ``--real-sizes``: pages of the web's sizes
(median 49 KB, 9 % above 150 kB) sent gzip-compressed (``_broad_server.py``). The server
counts, per crawler: new connections and full TLS handshakes (those not resuming a session)
per page, and bytes per page as sent (compressed).

Modes: ``polite`` (1 request/s and 1 connection per host, burst 1) and ``fast`` (no delay,
``--fast-conn`` connections per host). Each crawler gets the same politeness: ours through
``start_crawl(rate=, concurrency=)``, Scrapy through its broad-crawl settings
(``_scrapy_broad.py``: CONCURRENT_REQUESTS=256, CONCURRENT_REQUESTS_PER_DOMAIN, DOWNLOAD_DELAY,
DownloaderAwarePriorityQueue).

Judged from the server's own log, the same way for every crawler: pages/s = distinct pages
fetched / (last - first request); end-to-end pages/s = distinct pages / wall time from the
start of the crawl (Scrapy: its process start; ours: ``start_crawl``, workers already up,
their start-up apart in ``startup_s``; ``e2e_cold`` counts it in);
``bound``: requests/s (robots.txt included) as a fraction of the politeness bound, hosts x rate
(polite mode only); ``max_1s``: most requests any host got in any 1-s window (the rules allow
rate + 1); in flight: requests the server was serving, mean and peak of 0.1-s samples over the
fetch span; missing / duplicate pages. For ours also: peak RSS and CPU seconds of every worker
process, CPU ms per page, and Redis commands per page (``INFO commandstats`` reset before the
crawl, so broker traffic is included), the busiest commands listed, and pages per Celery
message (pages / LPUSH calls: how many URLs a fetch message carried on average).

The pace is judged twice in polite mode (issue 31), with a tolerance of 0.02 s: by the
server's stamps (``server_over``: hosts over rate + 1 requests in a 1-s window;
``server_early``: requests early for the send gate's GCRA, ``server_earliest`` in s), taken
by its event loop, which a loaded machine starves; and by kernel arrival stamps on ``lo``
(``wire_*``, ``_wire.py``: exact however starved any process is; needs root or CAP_NET_RAW,
plain HTTP only; ``wire`` says why it was skipped, ``wire_drops`` must be 0). ``--hogs N``
runs N CPU busy loops beside our workers while our crawl runs: the overloaded polite crawl.
``--frontier-heads 0,16`` runs our crawl with every pending URL in Redis and with heads of 16
URLs a host, the rest spilled to chunks (issue 49), side by side (``_spill.py``: ``x_no_spill``,
hosts spilled, chunks written and refilled; ``--frontier-chunk`` sets the chunk's size).

``--outputs local,s3``: our crawl into a directory and into a SeaweedFS bucket started for
the run (``tests/support/seaweed.py``), ``--repeat`` times each, every other repetition in
swapped order. ``x_local*`` compare an s3 row with the local row of its repetition;
``upload_tail_s``: from ``wait()``'s return until no segment waits to upload; ``e2e_stored``:
pages / (wall + upload tail). Where the wall goes: ``to_first_s`` (``start_crawl`` to the
first request), ``span_s``, ``to_drained_s`` (last request to the last URL final) and
``drained_to_return_s`` (the finisher, then ``wait()``'s poll and summary read).

A layout is ``POOL:CONCURRENCYxFETCH_PROCESSES:PARSE_PROCESSES``, e.g. ``threads:256x2:2``.
The per-process in-flight peak (``inflight_peak`` over fetch processes) is what latency hiding
can reach: with slow hosts (``--latency 2,3``) it shows whether a pool keeps its requests
going, which the default latencies, where the CPU runs out first, do not.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _spill
import _util
import _wire
import psutil
import redis
from _broad_server import address
from _script_times import ScriptTimes
from _tls import make_certs
from crawl import cpu_seconds, redis_cpu, tree, wait_for_workers

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import free_port, local_workers, private_redis

HERE = Path(__file__).resolve().parent
MODES = {"polite": (1.0, 1), "fast": (math.inf, None)}
#: Seconds a stamp may be off for the ``server_*`` and ``wire_*`` judges: kernel stamps are
#: exact, but the send gate paces by Redis's clock and GCRA sends exactly 1 s apart must not
#: count as 3 in a 1-s window.
WIRE_TOLERANCE = 0.02


@contextlib.contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """``n`` busy loops at normal priority while our crawl runs (``--hogs``: overload)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait(5)


class Web:
    """The server subprocess and its log."""

    def __init__(self, args: Any, tmp: str) -> None:
        self.hosts, self.pages, self.port = args.hosts, args.pages, free_port()
        self.log = Path(args.keep or tmp) / "server.log"
        self.log.touch()
        https = getattr(args, "https", False)
        self.scheme = "https" if https else "http"
        #: The private CA's file (--https), for our crawler's CRAWLER_CA_BUNDLE.
        self.ca: str | None = None
        #: Kernel arrival stamps (_wire.py) judge the pace too, unless this says why not.
        self.wire_off = (
            "not with --https (requests are encrypted)" if https else _wire.unavailable()
        )
        self.wire: _wire.Wire | None = None
        extra = ["--real-sizes"] if getattr(args, "real_sizes", False) else []
        if https:
            certs = Path(tmp) / "certs"
            certs.mkdir()
            self.ca = str(make_certs(certs, self.hosts))
            extra += ["--tls", str(certs)]
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_broad_server.py"), "--hosts", str(self.hosts)]
            + ["--pages", str(self.pages), "--port", str(self.port), "--log", str(self.log)]
            + ["--low", str(args.latency[0]), "--high", str(args.latency[1]), *extra],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the broad-crawl server did not start")

    def seeds(self) -> list[str]:
        return [f"{self.scheme}://{address(i)}:{self.port}/" for i in range(self.hosts)]

    def mark(self) -> int:
        """Where the crawl's lines begin in the server's log; starts the kernel capture."""
        time.sleep(0.3)  # the server flushes every 0.2 s
        if self.wire is not None:
            self.wire.close()  # a run not judged by rate (fast mode)
        if self.wire_off is None:
            self.wire = _wire.Wire(self.port)
        return self.log.stat().st_size

    def cpu(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def judge(self, start: int, rate: float) -> dict[str, Any]:
        time.sleep(0.3)
        with self.log.open("rb") as f:
            f.seek(start)
            lines = f.read().decode().splitlines()
        per_host: dict[int, list[float]] = defaultdict(list)
        stamps: dict[tuple[str, str], list[float]] = defaultdict(list)  # (address, path)
        kinds: Counter[str] = Counter()
        pages: Counter[tuple[int, str]] = Counter()
        inflight: list[tuple[float, int]] = []
        conns = resumed = sent = 0
        for line in lines:
            t, host, kind, path, size = line.split("\t")
            if kind == "inflight":
                inflight.append((float(t), int(path)))
                continue
            if kind == "conn":
                conns += 1
                resumed += path == "1"
                continue
            kinds[kind] += 1
            sent += int(size)
            per_host[int(host)].append(float(t))
            stamps[(address(int(host)), path)].append(float(t))
            if kind == "page":
                pages[(int(host), "/" if path == "/" else path)] += 1
        times = sorted(t for ts in per_host.values() for t in ts)
        if not times:
            return {"requests": 0}
        first, last = times[0], times[-1]
        span = max(last - first, 1e-9)
        busy = [n for t, n in inflight if first <= t <= last] or [0]
        requests = len(times)
        max_1s = max(_max_in_window(sorted(ts), 1.0) for ts in per_host.values())
        out: dict[str, Any] = {
            "pages": kinds["page"],
            "distinct": len(pages),
            "expected": self.hosts * self.pages,
            "missing": self.hosts * self.pages - len(pages),
            "duplicates": sum(pages.values()) - len(pages),
            "robots": kinds["robots"],
            "private": kinds["private"],
            "requests": requests,
            "span_s": span,
            "first_at": first,
            "last_at": last,
            "pages_per_s": len(pages) / span,
            "inflight_mean": sum(busy) / len(busy),
            "inflight_peak": max(busy),
            "max_1s": max_1s,
            "conns": conns,
            "new_conns_per_page": conns / max(kinds["page"], 1),
            "full_handshakes_per_page": (conns - resumed) / max(kinds["page"], 1)
            if self.scheme == "https"
            else 0.0,
            "resumed": resumed,
            "kb_per_page": sent / 1000 / max(kinds["page"], 1),
        }
        if math.isfinite(rate):
            out["bound"] = requests / span / (self.hosts * rate)
            out["hosts_over"] = sum(
                _max_in_window(sorted(ts), 1.0) > rate + 1 for ts in per_host.values()
            )
            out.update(self.judges(per_host, stamps, rate))
        return out

    def judges(
        self,
        server: dict[int, list[float]],
        stamps: dict[tuple[str, str], list[float]],
        rate: float,
    ) -> dict[str, Any]:
        """Issue 31's pace judged twice, without tolerance: by the server's stamps (its event
        loop can be starved and stamp late) and by the kernel's (``_wire.py``), both with
        :data:`WIRE_TOLERANCE`: hosts over
        rate + 1 in a window of 1 s less the tolerance, requests early for the GCRA beyond it,
        and the earliest (s, tolerance included)."""
        tol = WIRE_TOLERANCE
        by_server = _wire.pace({h: sorted(ts) for h, ts in server.items()}, rate, 1, tol)
        out = {f"server_{k}": v for k, v in by_server.items() if k != "max_1s"}
        if self.wire is None:
            out["wire"] = f"skipped: {self.wire_off}"
            return out
        arrivals, drops, self.wire = self.wire.close(), self.wire.drops, None
        hosts = {address(i): i for i in range(self.hosts)}
        by_wire = _wire.pace(_wire.per_host(arrivals, hosts), rate, 1, tol)
        out.update({f"wire_{k}": v for k, v in by_wire.items()})
        out["wire_requests"], out["wire_drops"] = len(arrivals), drops
        out.update(_wire.lag(arrivals, stamps))
        return out

    def close(self) -> None:
        if self.wire is not None:
            self.wire.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _max_in_window(times: list[float], width: float) -> int:
    best = 0
    for i, t in enumerate(times):
        best = max(best, bisect.bisect_left(times, t + width) - i)
    return best


def uploads_done(client: Any, crawl_id: str, timeout: float) -> float | None:
    """Seconds from the crawl's end until none of its segments waits (None: not in time)."""
    from crawler_tasks.state.keys import Keys
    from crawler_tasks.state.segments import Segments

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not Segments(client, Keys(), crawl_id).waiting(set()).waiting:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def parse_layout(item: str) -> tuple[str, int, int, int]:
    pool, _, rest = item.partition(":")
    fetch, _, parsers = rest.partition(":")
    conc, _, procs = fetch.partition("x")
    return pool, int(conc), int(procs or 1), int(parsers or 2)


@contextlib.contextmanager
def redis_for(state: str) -> Iterator[tuple[str, str, list[redis.Redis]]]:
    """(broker URL, crawl-state URL, a client of every Redis node): ``one`` Redis for both,
    or a standalone broker and a 3-master ``cluster`` (tests/support/cluster.py) for the state."""
    with private_redis() as url:
        if state == "one":
            yield url, url, [redis.Redis.from_url(url)]
            return
        from tests.support.cluster import Cluster

        c = Cluster(masters=3)
        try:
            yield url, c.url, [redis.Redis.from_url(url), *(n.client() for n in c.nodes)]
        finally:
            c.stop()


def run_ours(
    args: Any,
    web: Web,
    mode: str,
    layout: str,
    state: str = "one",
    store: tuple[str, dict[str, str]] | None = None,
    head: int = 0,
) -> dict[str, Any]:
    """``store``: an s3:// output and the workers' AWS environment (``--outputs s3``).
    ``head`` > 0: the crawl's ``frontier_head`` (``--frontier-heads``), so it spills."""
    pool, conc, fetchers, parsers = parse_layout(layout)
    rate, per_host = MODES[mode]
    per_host = per_host or args.fast_conn
    with (
        redis_for(state) as (url, state_url, nodes),
        tempfile.TemporaryDirectory(prefix="bench-broad-") as tmp,
    ):
        ca_env = {"CRAWLER_CA_BUNDLE": web.ca} if web.ca else {}
        settings = load(env=ca_env, broker_url=url, redis_url=state_url, output_dir=tmp)
        client = nodes[0]  # the broker
        t0 = time.monotonic()
        with local_workers(
            url,
            state_url,
            fetch_threads=conc,
            parsers=parsers,
            fetchers=fetchers,
            pool=pool,
            log_dir=args.keep or tmp,
            extra_env={
                **args.worker_env,
                **ca_env,
                **(store[1] if store else {}),
            },
            events=args.events,
        ) as procs:
            wait_for_workers(client)
            roots = [p.pid for p in procs]
            start = web.mark()
            cpu0, wcpu0 = web.cpu(), cpu_seconds(tree(roots))
            rcpu0 = [redis_cpu(n) for n in nodes]
            for n in nodes:
                n.config_resetstat()
            t1 = time.monotonic()
            # scaling.py and dashboard.py call this with arguments of their own, without --hogs.
            hogs = getattr(args, "hogs", 0)
            times = ScriptTimes(client) if getattr(args, "script_times", False) else None
            tails = _tails_options(args, head)
            watch: _spill.SpillWatch | None = None
            with (
                _util.RssSampler(roots, interval=0.5) as rss,
                cpu_hogs(hogs),
                times or contextlib.nullcontext(),
            ):
                started = time.time()
                crawl = start_crawl(
                    web.seeds(),
                    settings=settings,
                    output=store[0] if store else tmp,
                    allow_private_networks=True,
                    allowed_domains=[address(i) for i in range(web.hosts)],
                    rate=rate,
                    concurrency=per_host,
                    **tails,
                )
                try:
                    with _spill.SpillWatch(crawl) if tails else contextlib.nullcontext() as watch:
                        summary = crawl.wait(timeout=args.timeout)
                except TimeoutError:
                    summary = {"status": f"not finished after {args.timeout:.0f}s"}
                    crawl.cancel()
                returned = time.time()
            wall = time.monotonic() - t1
            drained = crawl.store.lifecycle.read().finished_at or returned
            # An s3:// crawl's records are all in the store once no segment waits.
            upload_tail = uploads_done(client, crawl.id, args.timeout) if store else None
            node_calls = [sum(v["calls"] for v in n.info("commandstats").values()) for n in nodes]
            reads = sum(int(n.info("stats")["total_reads_processed"]) for n in nodes)
            cmdstats = _merged_commandstats(nodes)
            node_cpu = [redis_cpu(n) - c0 for n, c0 in zip(nodes, rcpu0, strict=True)]
            rcpu = sum(node_cpu)
            wcpu1 = cpu_seconds(tree(roots))
            server_cpu = web.cpu() - cpu0
            logs = [
                f.read_text(errors="replace")
                for f in Path(args.keep or tmp).glob("*.log")
                if f.name != "server.log"
            ]
            tracebacks = sum(text.count("Traceback") for text in logs)
            warnings = Counter(
                line.split("] ", 1)[-1][:70]
                for text in logs
                for line in text.splitlines()
                if "WARNING" in line or "ERROR" in line
            ).most_common(6)
        for n in nodes:
            n.close()
    figures = web.judge(start, rate)
    phases = crawl_phases(figures, started, drained, returned)
    n = max(figures.get("pages", 0), 1)
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in cmdstats.items()}
    usec = {k.removeprefix("cmdstat_"): v["usec"] for k, v in cmdstats.items()}
    return {
        "crawler": f"ours {layout}"
        + ("" if state == "one" else f" state={state}")
        + _spill.label(head)
        + (" s3" if store else ""),
        "mode": mode,
        "frontier_head": head,
        **_spill.figures(watch, summary.get("counters") or {}),
        **({"upload_tail_s": upload_tail} if store else {}),
        **figures,
        **phases,
        "wall_s": wall,
        "startup_s": t1 - t0,
        "e2e_pages_per_s": figures.get("distinct", 0) / wall,
        "e2e_cold": figures.get("distinct", 0) / (wall + t1 - t0),
        # Until every record is where a reader finds it: an s3:// crawl's in the bucket.
        "e2e_stored": figures.get("distinct", 0) / (wall + (upload_tail or 0.0)),
        "status": summary.get("status"),
        "counters": {
            k: v
            for k, v in (summary.get("counters") or {}).items()
            if k.startswith(("failed", "retr", "status:5", "attempt")) or k == "done"
        },
        "inflight_per_fetch_process": figures.get("inflight_mean", 0) / fetchers,
        "peak_rss_mb": {k: round(v / 2**20, 1) for k, v in sorted(rss.peak.items())},
        "cpu_ms_per_page": sum(wcpu1.get(p, 0) - wcpu0.get(p, 0) for p in wcpu1) / n * 1000,
        "rss_mb": round(sum(rss.peak.values()) / 2**20),
        "redis_cpu_ms_per_page": rcpu / n * 1000,
        "server_cpu_ms_per_page": server_cpu / n * 1000,
        # INFO commandstats counts the commands a Lua script runs as well as those clients
        # send; a network read is one round trip (a pipeline is one), what costs a Redis most.
        "redis_cmds_per_page": sum(calls.values()) / n,
        "redis_round_trips_per_page": reads / n,
        # One Redis's core, all ours: the pages/s at which the busiest node would be saturated.
        "redis_bound_pages_per_s": n / max(max(node_cpu), 1e-9),
        # Every Celery message is one LPUSH on the broker (fetch, fetch_many, parse): pages per
        # message shows how many URLs a fetch message carried on average.
        "pages_per_message": n / max(calls.get("lpush", 0), 1),
        # Node 0 is the broker; with a cluster, the others hold the crawl state.
        "cmds_per_s_by_node": [round(c / wall) for c in node_calls],
        "redis_cpu_share_by_node": [round(c / wall, 3) for c in node_cpu],
        "redis_calls_per_page": {
            k: round(v / n, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:12]
        },
        # Time inside commands (a script's includes what it runs); the rest of the Redis CPU
        # is network I/O and the event loop.
        "redis_usec_per_page": {
            k: round(v / n, 1) for k, v in sorted(usec.items(), key=lambda kv: -kv[1])[:8]
        },
        **(
            {
                "script_usec_per_page": {
                    k: (round(v / n, 1), round(times.calls[k] / n, 2))
                    for k, v in times.usec.most_common(16)
                }
            }
            if times
            else {}
        ),
        "worker_log_tracebacks": tracebacks,
        "worker_log_warnings": warnings,
    }


def _tails_options(args: Any, head: int) -> dict[str, int]:
    """start_crawl's frontier options for a run with heads of ``head`` URLs (none: today's
    frontier, every pending URL in Redis). scaling.py and dashboard.py have no such arguments."""
    if not head:
        return {}
    chunk = getattr(args, "frontier_chunk", 0)
    return {"frontier_head": head, **({"frontier_chunk": chunk} if chunk else {})}


def crawl_phases(
    figures: dict[str, Any], started: float, drained: float, returned: float
) -> dict[str, float]:
    """Where a crawl's wall time goes (Unix seconds; the server's stamps and Redis's
    ``finished_at`` share this machine's clock): ``start_crawl`` to the first request, the
    fetch span, the last request to the crawl drained (finishing.lua: its last URL final),
    and from there until ``Crawl.wait()`` returned (the finisher: orphans, summary.json, the
    final status; then ``wait``'s poll and its summary read)."""
    first, last = figures.get("first_at"), figures.get("last_at")
    if first is None or last is None:
        return {}
    return {
        "to_first_s": first - started,
        "to_drained_s": drained - last,
        "drained_to_return_s": returned - drained,
    }


def _merged_commandstats(nodes: list[redis.Redis]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for n in nodes:
        for k, v in n.info("commandstats").items():
            got = out.setdefault(k, {"calls": 0, "usec": 0})
            got["calls"] += int(v["calls"])
            got["usec"] += int(v["usec"])
    return out


def run_scrapy(args: Any, web: Web, mode: str) -> dict[str, Any]:
    rate, per_host = MODES[mode]
    per_host = per_host or args.fast_conn
    delay = 0.0 if math.isinf(rate) else 1 / rate
    with tempfile.TemporaryDirectory(prefix="bench-scrapy-") as tmp:
        seeds = Path(tmp) / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        cmd = [sys.executable, str(HERE / "_scrapy_broad.py"), str(seeds), f"{tmp}/out.jsonl"]
        cmd += [str(per_host), str(delay), str(args.scrapy_concurrency)]
        start, cpu0 = web.mark(), web.cpu()
        t0 = time.monotonic()
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            peak, cpu = 0, 0.0
            ps = psutil.Process(proc.pid)
            while proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, ps.memory_info().rss)
                    t = ps.cpu_times()
                    cpu = t.user + t.system
                if time.monotonic() - t0 > args.timeout:
                    proc.kill()
                time.sleep(0.5)
            out.seek(0)
            tail = out.read().decode(errors="replace")[-600:]
        wall = time.monotonic() - t0
    figures = web.judge(start, rate)
    n = max(figures.get("pages", 0), 1)
    row = {
        "crawler": f"scrapy {args.scrapy_concurrency}",
        "mode": mode,
        **figures,
        "wall_s": wall,
        "e2e_pages_per_s": figures.get("distinct", 0) / wall,
        "e2e_cold": figures.get("distinct", 0) / wall,
        "status": f"exit {proc.returncode}",
        "peak_rss_mb": {"scrapy": round(peak / 2**20, 1)},
        "rss_mb": round(peak / 2**20),
        "cpu_ms_per_page": cpu / n * 1000,
        "server_cpu_ms_per_page": (web.cpu() - cpu0) / n * 1000,
    }
    if proc.returncode:
        row["output_tail"] = tail
    return row


COLUMNS = [
    "rep",
    "mode",
    "crawler",
    "pages_per_s",
    "x_scrapy",
    "x_local",
    "x_local_cpu",
    "upload_tail_s",
    "x_no_spill",
    "x_no_spill_cpu",
    "hosts_spilled",
    "chunks_written",
    "chunks_refilled",
    "e2e_pages_per_s",
    "x_local_e2e",
    "e2e_stored",
    "x_local_stored",
    "x_scrapy_e2e",
    "e2e_cold",
    "bound",
    "max_1s",
    "hosts_over",
    "server_over",
    "server_early",
    "server_earliest",
    "wire_over",
    "wire_early",
    "wire_earliest",
    "wire_max_1s",
    "wire_drops",
    "stamp_lag_p50_ms",
    "stamp_lag_p99_ms",
    "stamp_lag_max_ms",
    "wire",
    "inflight_mean",
    "inflight_peak",
    "pages",
    "missing",
    "duplicates",
    "private",
    "wall_s",
    "to_first_s",
    "span_s",
    "to_drained_s",
    "drained_to_return_s",
    "cpu_ms_per_page",
    "new_conns_per_page",
    "full_handshakes_per_page",
    "kb_per_page",
    "rss_mb",
    "redis_cmds_per_page",
    "redis_round_trips_per_page",
    "redis_cpu_ms_per_page",
    "redis_bound_pages_per_s",
    "pages_per_message",
]


def add_latency(p: argparse.ArgumentParser) -> None:
    """The site's response latency, for every bench that serves it (broad, scaling)."""
    p.add_argument(
        "--latency",
        default="0.05,0.35",
        help="LOW,HIGH seconds each response waits (fixed per URL, uniform between them)",
    )


def read_latency(p: argparse.ArgumentParser, text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    try:
        latency = (float(low), float(high or low))
    except ValueError:
        p.error(f"--latency: not LOW,HIGH seconds: {text!r}")
    if not 0 <= latency[0] <= latency[1]:
        p.error(f"--latency: need 0 <= LOW <= HIGH, got {latency}")
    return latency


def compare_outputs(rows: list[dict[str, Any]]) -> None:
    """S3 output against local, same mode, layout and repetition, in this run: pages/s (of
    the fetch span, end to end, and until every record is in the bucket) and CPU a page."""
    for r in rows:
        local = next(
            (
                s
                for s in rows
                if s["mode"] == r["mode"]
                and s["crawler"] + " s3" == r["crawler"]
                and s.get("rep") == r.get("rep")
            ),
            None,
        )
        if local and local.get("pages_per_s"):
            r["x_local"] = r.get("pages_per_s", 0) / local["pages_per_s"]
            r["x_local_e2e"] = r.get("e2e_pages_per_s", 0) / local["e2e_pages_per_s"]
            r["x_local_stored"] = r.get("e2e_stored", 0) / local["e2e_stored"]
            r["x_local_cpu"] = r.get("cpu_ms_per_page", 0) / max(local["cpu_ms_per_page"], 1e-9)


def run_layout(
    args: Any, web: Web, mode: str, layout: str, stores: dict[str, Any], heads: list[int]
) -> list[dict[str, Any]]:
    """Our crawl in one mode and layout: each frontier head, ``--repeat`` times each output
    (every other repetition in the reverse order: neither output always runs first, on a
    cold page cache or beside a neighbour's load)."""
    rows = []
    outputs = list(stores)
    for head in heads:
        for rep in range(args.repeat):
            for kind in outputs if rep % 2 == 0 else outputs[::-1]:
                _util.log(args, f"{mode}: ours {layout}{_spill.label(head)} {kind} #{rep + 1}")
                row = run_ours(args, web, mode, layout, store=stores[kind], head=head)
                rows.append({"rep": rep + 1, **row})
    return rows


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--pages", type=int, default=21, help="HTML pages per host")
    p.add_argument("--modes", default="polite,fast")
    p.add_argument("--layouts", default="threads:256x2:2", help="POOL:CONCxFETCHERS:PARSERS,...")
    p.add_argument("--fast-conn", type=int, default=4, help="connections per host, fast mode")
    add_latency(p)
    p.add_argument("--scrapy-concurrency", type=int, default=256)
    p.add_argument("--timeout", type=float, default=600.0, help="per crawler, seconds")
    p.add_argument("--skip-scrapy", action="store_true")
    p.add_argument(
        "--script-times", action="store_true", help="Redis's time per Lua script (SLOWLOG)"
    )
    p.add_argument(
        "--events", action="store_true", help="workers send task events (-E, for Flower)"
    )
    p.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument(
        "--outputs",
        default="local",
        help="local,s3: our crawl's output in a directory, in a SeaweedFS bucket, or both",
    )
    _spill.add_arguments(p)
    p.add_argument("--repeat", type=int, default=1, help="runs of our crawl per output (--outputs)")
    p.add_argument("--keep", help="existing directory for the server's and workers' logs")
    p.add_argument("--https", action="store_true", help="HTTPS only, a private CA")
    p.add_argument("--real-sizes", action="store_true", help="the web's page sizes, gzip")
    p.add_argument(
        "--hogs", type=int, default=0, help="CPU busy loops beside our workers (overload)"
    )
    args = p.parse_args()
    args.worker_env = dict(kv.split("=", 1) for kv in args.worker_env)
    args.latency = read_latency(p, args.latency)
    heads = _spill.read_heads(p, args)
    if not args.skip_scrapy and importlib.util.find_spec("scrapy") is None:
        p.error("Scrapy is not installed: .venv/bin/pip install -e '.[bench]', or --skip-scrapy")
    rows: list[dict[str, Any]] = []
    outputs = args.outputs.split(",")
    if not outputs or set(outputs) - {"local", "s3"}:
        p.error(f"--outputs: local, s3 or both, got {args.outputs!r}")
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp, contextlib.ExitStack() as stack:
        web = Web(args, tmp)
        try:
            stores: dict[str, Any] = dict.fromkeys(outputs)
            if "s3" in outputs:
                from tests.support.seaweed import seaweed

                server = stack.enter_context(seaweed())
                stores["s3"] = (f"s3://{server.make_bucket('bench-broad')}/runs", server.env())
            for mode in args.modes.split(","):
                for layout in [x for x in args.layouts.split(",") if x]:
                    rows += run_layout(args, web, mode, layout, stores, heads)
                if not args.skip_scrapy:
                    _util.log(args, f"{mode}: scrapy")
                    rows.append(run_scrapy(args, web, mode))
        finally:
            web.close()
    compare_outputs(rows)
    _spill.compare(rows)
    for r in rows:
        ref = next((s for s in rows if s["mode"] == r["mode"] and "scrapy" in s["crawler"]), None)
        if ref and ref.get("pages_per_s"):
            r["x_scrapy"] = r.get("pages_per_s", 0) / ref["pages_per_s"]
            r["x_scrapy_e2e"] = r.get("e2e_pages_per_s", 0) / ref["e2e_pages_per_s"]
    web_info = {
        "hosts": args.hosts,
        "pages": args.hosts * args.pages,
        "scheme": "https" if args.https else "http",
        "sizes": "real (median 49 KB, gzip)" if args.real_sizes else "~2.5 KB",
        "cpus": os.cpu_count(),
    }
    tables = [
        _util.table("Web", [web_info]),
        _util.table("Pages/s from the server's log", rows, COLUMNS),
        _util.table(
            "Peak RSS per process (MB)",
            [
                {"mode": r["mode"], "crawler": r["crawler"], "process": k, "peak_rss_mb": v}
                for r in rows
                for k, v in r["peak_rss_mb"].items()
            ],
        ),
        _util.table(
            "Ours: Redis commands per page (busiest)",
            [
                {"mode": r["mode"], "crawler": r["crawler"], **r["redis_calls_per_page"]}
                for r in rows
                if "redis_calls_per_page" in r
            ],
        ),
        _util.table(
            "Ours: Redis microseconds per page inside commands (busiest)",
            [
                {"mode": r["mode"], "crawler": r["crawler"], **r["redis_usec_per_page"]}
                for r in rows
                if "redis_usec_per_page" in r
            ],
        ),
        _util.table(
            "Ours: Redis microseconds, calls per page by script (--script-times)",
            [
                {"mode": r["mode"], "crawler": r["crawler"], "what": k, "usec": u, "calls": c}
                for r in rows
                for k, (u, c) in r.get("script_usec_per_page", {}).items()
            ],
        ),
    ]
    _util.emit(args, {"web": web_info, "runs": rows}, tables)
    ok = all(
        r.get("missing") == 0 and not r.get("hosts_over") and not r.get("wire_over") for r in rows
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
