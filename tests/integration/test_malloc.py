"""A worker process caps glibc's malloc arenas (``CRAWLER_MALLOC_ARENAS``, default 2;
worker/process/malloc.py): each arena a thread is handed shows in /proc/PID/maps as a reserved
region (``---p``, a MiB or more, no file), and a capped process has at most one such
region besides the main heap, where an uncapped one gets an arena for each of its busy
threads (up to 8 a core)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from crawler_tasks.worker.process.malloc import limit_arenas
from tests.faults.test_faults import cluster, start, wait
from tests.support.paths import ROOT
from tests.support.sitegen import running_sites

#: 24 threads allocating at once (a barrier keeps them all alive): glibc hands each a new
#: arena, up to its cap.
THREADS = """
import sys, threading
sys.path.insert(0, sys.argv[2])
from crawler_tasks.worker.process.malloc import limit_arenas
print(limit_arenas(int(sys.argv[1])))
keep, barrier = [], threading.Barrier(24)
def work():
    keep.append(bytearray(100_000))  # below mmap's threshold: from the thread's arena
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(24)]
[t.start() for t in threads]
[t.join() for t in threads]
print(open("/proc/self/maps").read())
"""


def arenas(maps: str) -> int:
    """Reserved anonymous regions of 1 MiB or more: glibc arenas (thread stacks' guard
    pages are 4 KiB; Python's own arenas are readable)."""
    count = 0
    for line in maps.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[1] != "---p" or len(parts) > 5:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        count += hi - lo >= 1 << 20
    return count


def _threads(cap: int) -> tuple[str, int]:
    root = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", THREADS, str(cap), root], capture_output=True, text=True, check=True
    ).stdout
    first, _, maps = out.partition("\n")
    return first, arenas(maps)


def test_limit_arenas_caps_a_threaded_process():
    assert _threads(2) == ("True", 1)  # the main heap is not a reserved region
    said, uncapped = _threads(0)
    assert said == "False" and uncapped >= 4  # 16 allowed on 2 cores
    assert limit_arenas(0) is False


def test_a_fetch_worker_caps_its_arenas(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """Real fetch workers (8 threads) after a crawl: the default setting caps them, 0 does
    not."""
    got = {}
    for cap in ("2", "0"):
        with (
            running_sites(["127.0.0.93", "127.0.0.94"], 40, 4) as (_graph, servers),
            cluster(redis_url, tmp_path, CRAWLER_MALLOC_ARENAS=cap) as c,
        ):
            c.start("fetch", "fetch")
            _seeds, crawl = start(settings, servers)
            assert wait(crawl, 60)["status"] == "finished"
            got[cap] = arenas(Path(f"/proc/{c.procs['fetch'].pid}/maps").read_text())
    assert got["2"] <= 1 < got["0"], got
