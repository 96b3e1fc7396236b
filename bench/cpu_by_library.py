"""Where each crawler's CPU goes, by library: ours against Scrapy in one ``broad.py`` run.

    .venv/bin/python bench/cpu_by_library.py               # HTTPS, real sizes, 200 x 41, fast
    .venv/bin/python bench/cpu_by_library.py --seconds 30 -- --https --hosts 100 --pages 21
    .venv/bin/python bench/cpu_by_library.py -- --https --real-sizes --skip-scrapy   # ours only

py-spy (``make profile``) sees Python frames only, and only the thread holding the GIL; the
CPU a process spends in the kernel (syscalls, thread switches), in zlib, libc or OpenSSL is
not there. This samples the whole machine with ``perf record -e cpu-clock`` (a software
event: no hardware counters needed, as in a VM) for ``--seconds`` in the middle of each
crawler's run, and prints each busy process's share of the machine and its samples by
library. Needs ``perf`` (Debian: linux-perf) and the right to sample every process (root,
or ``kernel.perf_event_paranoid`` <= 0).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
from _util import broad_args

HERE = Path(__file__).resolve().parent

#: (category, test on the sample's symbol and shared object), first match wins.
LIBRARIES = (
    (
        "Python: garbage collector",
        lambda sym, dso: "libpython" in dso and sym.startswith(("gc_", "visit_")),
    ),
    ("Python: interpreter", lambda sym, dso: "libpython" in dso),
    ("kernel (syscalls, switches)", lambda sym, dso: "kernel" in dso),
    ("zlib (inflate, WARC deflate)", lambda sym, dso: dso.startswith(("libz.", "libz-ng"))),
    ("libc (copies, malloc)", lambda sym, dso: dso.startswith("libc.")),
    ("lxml / libxml2", lambda sym, dso: "etree" in dso or "libxml" in dso),
    ("TLS (OpenSSL)", lambda sym, dso: "libssl" in dso or "libcrypto" in dso),
)


def library(sym: str, dso: str) -> str:
    return next((name for name, test in LIBRARIES if test(sym, dso)), "other")


def samples(data: Path) -> list[tuple[int, str, str, str]]:
    """(pid, command, symbol, shared object) of every sample in ``data``."""
    cmd = ["perf", "script", "-i", str(data), "-F", "comm,pid,tid,ip,sym,dso"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or "/" not in parts[1]:
            continue
        dso = parts[-1].strip("()").rsplit("/", 1)[-1]
        sym = parts[3] if len(parts) > 4 else ""
        out.append((int(parts[1].split("/")[0]), parts[0], sym, dso))
    return out


def role(pid: int, comm: str, names: dict[int, str]) -> str:
    return names.get(pid) or comm


def describe(label: str, rows: list[tuple[int, str, str, str]], names: dict[int, str]) -> str:
    total = len(rows) or 1
    by_pid = Counter((pid, role(pid, comm, names)) for pid, comm, _s, _d in rows)
    lines = [f"## {label}: {len(rows)} samples of the whole machine", ""]
    lines += [
        "| process | share of the machine | " + " | ".join(n for n, _ in LIBRARIES) + " | other |"
    ]
    lines += ["|---" * (len(LIBRARIES) + 3) + "|"]
    for (pid, name), n in by_pid.most_common(6):
        if n / total < 0.02:
            break
        libs = Counter(library(s, d) for p, _c, s, d in rows if p == pid)
        cells = [f"{100 * libs[lib] / n:.1f}" for lib, _ in LIBRARIES] + [
            f"{100 * libs['other'] / n:.1f}"
        ]
        lines.append(f"| {name} [{pid}] | {100 * n / total:.1f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def process_names() -> dict[int, str]:
    """What each crawler process is, from its command line."""
    names = {}
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "crawl.high" in cmd:
            names[p.info["pid"]] = "ours: fetch process"
        elif "-Q parse" in cmd or "parse" in cmd and "crawler_tasks.worker" in cmd:
            names[p.info["pid"]] = "ours: parse process"
        elif "_scrapy_broad.py" in cmd:
            names[p.info["pid"]] = "Scrapy"
        elif "_broad_server.py" in cmd:
            names[p.info["pid"]] = "the web server"
    return names


def wait_for(test: str, run: subprocess.Popen[str], timeout: float = 300) -> bool:
    """Until a process ``test`` names runs; False if the bench ended first or it never came."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and run.poll() is None:
        if any(v.startswith(test) for v in process_names().values()):
            return True
        time.sleep(0.5)
    return False


def record(data: Path, seconds: float) -> dict[int, str]:
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-a", "-F", "499", "-o", str(data)]
    subprocess.run([*cmd, "--", "sleep", str(seconds)], check=True, capture_output=True)
    return process_names()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="sampled per crawler")
    p.add_argument("--settle", type=float, default=12.0, help="seconds into a run before")
    broad_args(p)
    args = p.parse_args()
    bench = [sys.executable, str(HERE / "broad.py"), "--modes", "fast", *args.bench_args]
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        run = subprocess.Popen(bench, stdout=subprocess.PIPE, text=True)
        parts = []
        crawlers = [("ours", "ours: fetch"), ("Scrapy", "Scrapy")]
        if "--skip-scrapy" in args.bench_args:
            crawlers = crawlers[:1]
        for label, test in crawlers:
            if not wait_for(test, run):
                print(f"{label} never started", file=sys.stderr)
                break
            time.sleep(args.settle)
            data = Path(tmp) / f"{label}.data"
            names = record(data, args.seconds)
            parts.append((label, data, names))
        out, _ = run.communicate()
        for label, data, names in parts:
            print(describe(label, samples(data), names), end="\n\n")
        print(out)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
