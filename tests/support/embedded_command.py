"""`crawler crawl --embedded` as a process of its own, marked so that every process it starts
can be found in /proc (the mark is in their environment), and the /proc readers that find them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def marked(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``mark`` (inherited by every child)."""
    needle = f"CRAWL_TEST_MARK={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":  # zombies are gone already
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def redis_children(pid: int) -> list[int]:
    """redis-server children of ``pid`` (redis rewrites its environment: no mark there)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(") ", 1)
        if name.startswith("redis-server") and int(rest.split()[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def embedded_crawl(url: str, host: str, rate: str, out: Path, mark: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", url, "--embedded"]
    argv += ["--allow-private-networks", "--rate", f"{host}={rate}", "--output", str(out)]
    env = {**os.environ, "CRAWL_TEST_MARK": mark}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def crawl_started(out: Path) -> str:
    """'started' once a crawl directory with a pages file exists (the crawl is under way)."""
    return "started" if list(out.glob("*/pages-*.jsonl")) else ""
