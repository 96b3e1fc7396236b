"""broad.py's spilling runs (``--frontier-heads``): which hosts spilled, and the chunks moved.

A crawl started with ``frontier_head`` > 0 spills what a host has pending beyond its head to a
chunk store under its output (state/tails.py, chunk_store.placed). :class:`SpillWatch` samples
every partition's ``spilled`` hash (domain -> URLs in chunks) while the crawl runs: a host seen
there had at least one chunk written and indexed. The chunks written and refilled are the
crawl's own counters (``chunks_written``, ``chunks_refilled``: flush.lua, refill.lua), exact.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

#: Seconds between two samples of the spilled hashes (one pipeline of HKEYS a sample).
INTERVAL = 0.1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--frontier-heads",
        default="0",
        help="frontier_head of our crawls, side by side: 0 = every pending URL in Redis (no "
        "chunk store), N > 0 = heads of N URLs, the rest spilled to chunks (e.g. 0,16)",
    )
    p.add_argument(
        "--frontier-chunk", type=int, default=0, help="URLs per chunk when spilling (0: default)"
    )


def read_heads(p: argparse.ArgumentParser, args: Any) -> list[int]:
    """``--frontier-heads`` as numbers, in the order given (one bad value: the usage error)."""
    try:
        heads = [int(h) for h in args.frontier_heads.split(",")]
    except ValueError:
        p.error(f"--frontier-heads: not whole numbers: {args.frontier_heads!r}")
    if any(h < 0 for h in heads) or args.frontier_chunk < 0:
        p.error("--frontier-heads and --frontier-chunk: 0 or more")
    return heads


class SpillWatch:
    """Context manager around ``crawl.wait``: ``hosts`` is every domain seen with chunks."""

    def __init__(self, crawl: Any) -> None:
        self.crawl = crawl
        self.hosts: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SpillWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            pipe = self.crawl.client.pipeline(transaction=False)
            for part in self.crawl.ck.parts:
                pipe.hkeys(part.spilled)
            for keys in pipe.execute():
                self.hosts.update(k.decode() if isinstance(k, bytes) else k for k in keys)


def figures(watch: SpillWatch | None, counters: dict[str, int]) -> dict[str, Any]:
    """A spilling run's columns; nothing for a run that did not spill (``watch`` None)."""
    if watch is None:
        return {}
    return {
        "hosts_spilled": len(watch.hosts),
        "chunks_written": counters.get("chunks_written", 0),
        "chunks_refilled": counters.get("chunks_refilled", 0),
    }


def label(head: int) -> str:
    """A run's crawler label suffix: none for today's frontier (everything in Redis)."""
    return f" head={head}" if head else ""


def compare(rows: list[dict[str, Any]]) -> None:
    """Each spilling run against the same mode and crawler without spilling, in this run:
    ``x_no_spill`` (pages/s) and ``x_no_spill_cpu`` (worker CPU a page)."""
    for r in rows:
        head = r.get("frontier_head")
        if not head:
            continue
        plain_name = r["crawler"].replace(label(head), "")
        plain = next(
            (
                s
                for s in rows
                if s["mode"] == r["mode"]
                and s["crawler"] == plain_name
                and s.get("rep") == r.get("rep")
            ),
            None,
        )
        if plain and plain.get("pages_per_s"):
            r["x_no_spill"] = r.get("pages_per_s", 0) / plain["pages_per_s"]
            r["x_no_spill_cpu"] = r.get("cpu_ms_per_page", 0) / max(plain["cpu_ms_per_page"], 1e-9)
