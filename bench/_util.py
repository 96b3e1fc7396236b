"""Helpers shared by the benchmarks: argument parsing, tables, JSON, process sampling.

Not a benchmark itself. The scripts run as ``.venv/bin/python bench/NAME.py``, so this
directory is on ``sys.path``; the checkout is added for the test suite's sites and clusters
(``tests.support``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Last: a crawler_tasks on PYTHONPATH (another checkout, measured side by side) still comes
# first; ``tests`` is found here.
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


#: broad.py's arguments by default where a wrapper runs it (cpu_by_library.py, redis_cpu.py):
#: the HTTPS bench with the web's page sizes, 200 hosts x 41 pages.
BROAD_HTTPS = ["--https", "--real-sizes", "--hosts", "200", "--pages", "41"]


def broad_args(p: argparse.ArgumentParser) -> None:
    """The wrapper's arguments after ``--``: broad.py's (:data:`BROAD_HTTPS` by default)."""
    p.add_argument("bench_args", nargs="*", default=BROAD_HTTPS, help="broad.py's arguments")


def parser(doc: str | None) -> argparse.ArgumentParser:
    first = (doc or "").strip().splitlines()[0] if doc else None
    p = argparse.ArgumentParser(description=first)
    p.add_argument("--json", action="store_true", help="print the figures as JSON only")
    return p


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 0.01:
            return f"{value:.3f}"
        return f"{value:.2e}"
    return str(value)


def table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain-text table of ``rows`` (dicts), columns in first-seen order unless given."""
    if not rows:
        return f"{title}\n  (no rows)\n"
    cols: list[str] = list(columns or [])
    if not cols:
        for row in rows:
            cols += [c for c in row if c not in cols]
    cells = [[fmt(row.get(c, "")) for c in cols] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    out = [title, line, "  ".join("-" * w for w in widths)]
    for r in cells:
        out.append(
            "  ".join(
                v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths, strict=True)
            )
        )
    return "\n".join(out) + "\n"


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("-", "").replace("e", "").isdigit()


def emit(args: argparse.Namespace, result: dict[str, Any], tables: Iterable[str]) -> None:
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        for t in tables:
            print(t)


def log(args: argparse.Namespace, message: str) -> None:
    """Progress notes on stderr (kept out of --json output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class RssSampler:
    """Samples the RSS of processes (and their children) every ``interval`` s in a thread.

    ``roots`` are pids; each sample walks their process trees, so prefork children started
    later are included. ``peak`` maps "name[pid]" to the highest RSS seen, in bytes.
    """

    def __init__(self, roots: Sequence[int], interval: float = 0.5) -> None:
        import psutil

        self._psutil = psutil
        self.roots = list(roots)
        self.interval = interval
        self.peak: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        psutil = self._psutil
        while not self._stop.is_set():
            for root in self.roots:
                try:
                    proc = psutil.Process(root)
                    procs = [proc, *proc.children(recursive=True)]
                except psutil.NoSuchProcess:
                    continue
                for p in procs:
                    try:
                        rss = p.memory_info().rss
                        label = f"{_role(p)}[{p.pid}]"
                    except psutil.Error:
                        continue
                    self.peak[label] = max(self.peak.get(label, 0), rss)
            self.samples += 1
            self._stop.wait(self.interval)


def _role(proc: Any) -> str:
    try:
        cmd = proc.cmdline()
    except Exception:
        return proc.name()
    text = " ".join(cmd)
    for tag in ("fetch", "parse"):
        if f"--hostname {tag}" in text:
            kind = tag
            parent = proc.parent()
            is_child = parent is not None and f"--hostname {tag}" in " ".join(parent.cmdline())
            return f"{kind}-{'child' if is_child else 'main'}"
    return proc.name()
