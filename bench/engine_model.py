"""What a fetch engine costs a page, apart from the rest of a crawler (issue 32, step 3).

    .venv/bin/python bench/engine_model.py                    # HTTPS, real sizes, 200 x 41
    .venv/bin/python bench/engine_model.py --rounds 2 --with-ours --with-scrapy
    .venv/bin/python bench/engine_model.py --concurrency 64 --hogs 2   # overloaded

The web of ``broad.py --https --real-sizes`` (``_broad_server.py``). Each model crawls it with
two processes (the hosts split between them, as our two fetch processes share them), the
same work a page in all (``_engine_model.py``: HTTPS with kept connections, the gzip body,
our parser and links, three Redis script calls of ten commands, each its own round trip), and
its own engine (``--models``): ``threads`` (``--concurrency`` threads, requests), ``ours``
(the threads with our fetcher and state client), ``hybrid`` (the threads hand their HTTP
exchange to one asyncio loop, aiohttp) and ``asyncio`` (one loop, aiohttp and
redis.asyncio). A model keeps every thread busy (its queue never runs dry), so it shows what
an engine costs at that many requests in flight a process; our crawler runs fewer (its
dispatcher releases what the pools can start), and ``_loop_fetch.py`` measures the move in
the crawler itself (bench/README.md, round 11). ``--with-ours`` and ``--with-scrapy`` put our
crawler (``broad.py``'s fast mode) and Scrapy in the same run; ``--hogs N`` runs N CPU busy
loops beside each model and our crawler. Rounds alternate the order of the models.

Judged from the server's log as in ``broad.py``: pages, missing, duplicates, pages/s; CPU from
each process's own ``getrusage`` (all its threads). Exits 1 when a model did not crawl the
whole web (a missing page or an error).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _util
from broad import Web, add_latency, cpu_hogs, read_latency, run_ours, run_scrapy

from crawler_tasks.surface.embedded import private_redis

HERE = Path(__file__).resolve().parent
PROCESSES = 2
MODELS = ("threads", "ours", "hybrid", "asyncio")


class ModelFailed(Exception):
    """A model's process did not finish its crawl: no figures to report."""


def run_model(args: Any, web: Web, model: str, redis_url: str, tmp: str) -> dict[str, Any]:
    seeds = web.seeds()
    cmds, outs = [], []
    for i in range(PROCESSES):
        part = Path(tmp) / f"seeds-{model}-{i}.txt"
        part.write_text("\n".join(seeds[i::PROCESSES]) + "\n")
        out = Path(tmp) / f"out-{model}-{i}.json"
        out.unlink(missing_ok=True)
        outs.append(out)
        cmds.append(
            [sys.executable, str(HERE / "_engine_model.py"), model, str(part), str(web.ca)]
            + [redis_url, str(args.concurrency), str(args.fast_conn), str(out)]
        )
    start, t0 = web.mark(), time.monotonic()
    env = {**os.environ, "MODEL_ROUND_TRIPS": str(args.round_trips)}
    with cpu_hogs(args.hogs):
        procs = [subprocess.Popen(c, env=env) for c in cmds]
        for p in procs:
            try:
                p.wait(max(1.0, t0 + args.timeout - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wall = time.monotonic() - t0
    figures = web.judge(start, float("inf"))
    failed = [p.returncode for p in procs if p.returncode]
    if failed:
        raise ModelFailed(f"model {model}: a process exited {failed[0]} (its stderr above)")
    reports = [json.loads(o.read_text()) for o in outs]
    cpu = sum(r["cpu_s"] for r in reports)
    n = max(figures.get("pages", 0), 1)
    return {
        "crawler": f"model {model} {args.concurrency}x{PROCESSES}",
        **figures,
        "errors": sum(r["errors"] for r in reports),
        "wall_s": wall,
        "cpu_ms_per_page": cpu / n * 1000,
    }


COLUMNS = ["round", "crawler", "pages_per_s", "pages", "missing", "duplicates", "errors"]
COLUMNS += ["cpu_ms_per_page", "x_threads_cpu", "new_conns_per_page"]


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every argument checked before a server, a Redis or a process starts."""
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown or not args.models:
        p.error(f"--models: {unknown or args.models!r} not among {', '.join(MODELS)}")
    for name in ("hosts", "pages", "rounds", "concurrency", "fast_conn"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: at least 1, got {getattr(args, name)}")
    for name in ("round_trips", "hogs"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')}: at least 0, got {getattr(args, name)}")
    if not args.timeout > 0:
        p.error(f"--timeout: seconds above 0, got {args.timeout}")
    loops = {"hybrid", "asyncio"} & set(args.models.split(","))
    if loops and importlib.util.find_spec("aiohttp") is None:
        p.error(f"{', '.join(sorted(loops))} need aiohttp: .venv/bin/pip install -e '.[bench]'")
    if args.with_scrapy and importlib.util.find_spec("scrapy") is None:
        p.error("Scrapy is not installed: .venv/bin/pip install -e '.[bench]', or no --with-scrapy")


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--pages", type=int, default=41, help="HTML pages per host")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=256, help="threads or coroutines")
    p.add_argument("--models", default="threads,asyncio", help="threads, hybrid, asyncio")
    p.add_argument("--round-trips", type=int, default=3, help="Redis calls a page (models)")
    p.add_argument("--fast-conn", type=int, default=4, help="connections per host")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--hogs", type=int, default=0, help="CPU busy loops beside each crawler")
    p.add_argument("--with-ours", action="store_true", help="our crawler too (fast mode)")
    p.add_argument("--with-scrapy", action="store_true", help="Scrapy too")
    p.add_argument("--scrapy-concurrency", type=int, default=256)
    add_latency(p)
    args = p.parse_args()
    args.latency = read_latency(p, args.latency)
    check_args(p, args)
    # What run_ours and run_scrapy read besides.
    args.https, args.real_sizes, args.keep, args.events = True, True, None, False
    args.worker_env, args.script_times = {}, False
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp, private_redis() as url:
        web = Web(args, tmp)
        try:
            for r in range(args.rounds):
                models = args.models.split(",")
                models = models if r % 2 == 0 else models[::-1]
                batch = []
                for model in models:
                    _util.log(args, f"round {r + 1}: {model}")
                    batch.append({"round": r + 1, **run_model(args, web, model, url, tmp)})
                if args.with_ours:
                    _util.log(args, f"round {r + 1}: ours")
                    batch.append({"round": r + 1, **run_ours(args, web, "fast", "threads:256x2:2")})
                if args.with_scrapy:
                    _util.log(args, f"round {r + 1}: scrapy")
                    batch.append({"round": r + 1, **run_scrapy(args, web, "fast")})
                base = [b for b in batch if b["crawler"].startswith("model threads ")]
                for b in batch if base else []:
                    b["x_threads_cpu"] = b["cpu_ms_per_page"] / base[0]["cpu_ms_per_page"]
                rows += batch
        except ModelFailed as exc:
            print(exc, file=sys.stderr)
            return 1
        finally:
            web.close()
    _util.emit(
        args,
        {"rows": rows},
        [_util.table("CPU a page by fetch engine (HTTPS, real sizes)", rows, COLUMNS)],
    )
    # A model that did not crawl the whole web measured something else: a failed run.
    short = [r["crawler"] for r in rows if r.get("errors") or r.get("missing")]
    if short:
        print(f"incomplete crawls: {', '.join(short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
