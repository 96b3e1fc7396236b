"""Where a fetch process's Python time goes: ``bench/broad.py`` under py-spy (``make profile``).

    .venv/bin/python bench/profile.py                       # HTTPS, real sizes, 200 x 41, fast
    .venv/bin/python bench/profile.py --table out/raw-*.txt # the table of earlier samples

Runs the broad bench (our crawler only, fast mode, 2 fetch processes x 256 threads) and
attaches ``py-spy record --gil`` to every fetch process as it starts: samples of the thread
holding the GIL, that is, of Python work. Writes, in ``--out`` (default ``profile/``), a
flame graph per process (``flame-PID.svg``), its collapsed stacks (``raw-PID.txt``) and
prints a table of shares by category (the innermost frame that names one, as in issue 32)
and the deepest frames of our own code (inclusive). py-spy samples twice per process (one
pass per output format); each pass is non-blocking, so the process is not paused.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
PY_SPY = Path(sys.executable).parent / "py-spy"

#: (category, pattern on a frame's file as py-spy names it, relative to its sys.path entry),
#: tried in this order on each frame, innermost first.
CATEGORIES = (
    ("redis-py: socket reads/writes and reply parsing", r"^redis/"),
    ("TLS reads/writes", r"^ssl\.py"),
    ("urllib3 / http.client / requests", r"^(urllib3|requests)/|^http/client\.py"),
    ("kombu / celery", r"^(kombu|celery|billiard|vine)/"),
    ("threading / queue hand-offs", r"^(threading|queue|concurrent/futures/\w+)\.py"),
    ("lxml / links / text", r"^lxml/|^crawler_tasks/web/(page|urls|body|encoding)\.py"),
    ("WARC building", r"^crawler_tasks/worker/warc\.py|^warcio/"),
    ("JSON / output", r"^crawler_tasks/worker/output\.py|^json/"),
    ("own code", r"^crawler_tasks/"),
)
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def category(stack: list[str]) -> str:
    """The category of the innermost frame that has one."""
    for frame in reversed(stack):
        m = FRAME.match(frame)
        file = m["file"] if m else frame
        for name, pattern in CATEGORIES:
            if re.search(pattern, file):
                return name
    return "other (stdlib, interpreter)"


def read_raw(paths: list[Path]) -> list[tuple[list[str], int]]:
    stacks = []
    for path in paths:
        for line in path.read_text().splitlines():
            head, _, n = line.rpartition(" ")
            if head and n.isdigit():
                stacks.append((head.split(";"), int(n)))
    return stacks


def table(stacks: list[tuple[list[str], int]], top: int = 15) -> str:
    total = sum(n for _, n in stacks) or 1
    shares: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for stack, n in stacks:
        shares[category(stack)] += n
        seen = set()
        for frame in stack:  # inclusive: each own function once per sample
            m = FRAME.match(frame)
            if m and "crawler_tasks/" in m["file"]:
                name = f"{m['file'].split('crawler_tasks/')[-1]} {m['func']}"
                if name not in seen:
                    seen.add(name)
                    own[name] += n
    lines = [f"{total} samples of the thread holding the GIL", "", "| where | share |", "|---|---|"]
    lines += [f"| {name} | {100 * n / total:.1f} % |" for name, n in shares.most_common()]
    lines += ["", "| own frame (inclusive) | share |", "|---|---|"]
    skip = (
        "worker/tasks.py",
        "worker/visit/pipeline.py",
        "worker/process/app.py",
    )  # every page's callers
    rows = [(k, n) for k, n in own.most_common() if not k.startswith(skip)][:top]
    lines += [f"| `{name}` | {100 * n / total:.1f} % |" for name, n in rows]
    return "\n".join(lines)


def fetch_processes(root: int) -> list[int]:
    """Celery worker main processes consuming the fetch queues, under ``root``."""
    found = []
    try:
        for p in psutil.Process(root).children(recursive=True):
            cmd = " ".join(p.cmdline())
            # Started as `python -m crawler_tasks.worker` (local_workers) or `celery ... worker`.
            if "worker" in cmd and "crawl.high" in cmd:
                found.append(p.pid)
    except psutil.Error:
        pass
    return found


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = [sys.executable, str(HERE / "broad.py"), "--modes", "fast", "--skip-scrapy"]
    bench += ["--hosts", str(args.hosts), "--pages", str(args.pages), *args.bench_args]
    crawl = subprocess.Popen(bench)
    spies: dict[int, list[subprocess.Popen[bytes]]] = {}
    raws = []
    while crawl.poll() is None:
        for pid in fetch_processes(crawl.pid):
            if pid in spies:
                continue
            raw = out / f"raw-{pid}.txt"
            raws.append(raw)
            common = [str(PY_SPY), "record", "--gil", "--nonblocking", "--pid", str(pid)]
            common += ["--rate", str(args.rate)]
            spies[pid] = [
                subprocess.Popen([*common, "--format", "raw", "-o", str(raw)]),
                subprocess.Popen([*common, "-o", str(out / f"flame-{pid}.svg")]),
            ]
        time.sleep(0.2)
    for procs in spies.values():
        for p in procs:
            p.wait(timeout=60)
    present = [r for r in raws if r.exists()]
    if not present:
        print("py-spy wrote nothing (can it attach here? ptrace)", file=sys.stderr)
        return 1
    stacks = read_raw(present)
    print(table(stacks) if stacks else "no samples: the crawl ended before py-spy attached")
    return crawl.returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="profile")
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--pages", type=int, default=41)
    p.add_argument("--rate", type=int, default=100, help="samples per second")
    p.add_argument("--table", nargs="+", type=Path, help="only print the table of these raw files")
    p.add_argument("bench_args", nargs="*", default=["--https", "--real-sizes"])
    args = p.parse_args()
    if args.table:
        print(table(read_raw(args.table)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
