"""The staged segments of an s3:// crawl's files: their names, whose they are, and where a
record in them can be found while they move from the staging directory to the store.

A process of an s3:// crawl writes its files (worker/output/files.py) under its own
``CRAWLER_OUTPUT_DIR/<crawl_id>/``, in segments: the names a local crawl's files have
(``pages-<host>-<pid>.jsonl``: the *logical* name, which Redis entries and fences keep) with the
process's run and the segment's number after them, ``pages-<host>-<pid>-<run>-<seq>.jsonl``.
``run`` is the process's start time (``/proc/<pid>/stat``), so a later process with the same
pid is another writer, and a segment's writer can be told alive or dead from its name alone.
A segment is closed when its process starts the next one (size, age, the crawl's end, the
process's exit); then, or once its process is dead, it is uploaded under its own name and
deleted here (uploads.py). The names are deterministic, so an upload repeated after a kill
writes the same object again, never a second one.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ...state.objects import ObjectStore

#: The file beside a crawl's staged segments that names its store (read by the uploader of
#: any later process on this host, which may not know the crawl).
STORE_FILE = ".store"

_NAME = re.compile(
    r"^(?P<kind>pages|items|edges|crawl)-(?P<host>.+)-(?P<pid>\d+)-(?P<run>[0-9a-z]+)"
    r"-(?P<seq>\d{6})\.(?:jsonl|tsv|warc\.gz)$"
)

#: Segment numbers of this process, over all its crawls: a crawl's output closed and opened
#: again (LRU) starts a new segment, never appends to a closed one.
_numbers = itertools.count()


class SegmentName(NamedTuple):
    kind: str
    host: str
    pid: int
    run: str
    seq: int

    @property
    def writer(self) -> str:
        """The logical writer tag ("host-pid")."""
        return f"{self.host}-{self.pid}"


def parse(name: str) -> SegmentName | None:
    found = _NAME.match(name)
    if found is None:
        return None
    g = found.groupdict()
    return SegmentName(g["kind"], g["host"], int(g["pid"]), g["run"], int(g["seq"]))


def run_of(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, base 36); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name's closing parenthesis (it may hold spaces).
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    return _base36(ticks)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def alive(name: SegmentName) -> bool:
    """Is the writer of this segment (on this host) still running?"""
    return run_of(name.pid) == name.run


class Segmenting:
    """The segment a :class:`~.files.CrawlOutput` of an s3:// crawl writes now: logical names
    to the current segment's (:meth:`physical`), and the next segment (:meth:`next`, under
    the output's locks: nothing is appended between the end of one and the start of the
    next)."""

    def __init__(self, tag: str, run: str, opened: Callable[[str], None] | None = None) -> None:
        self.tag, self.run = tag, run
        #: Told each segment file's name as it is created, before a record is in it (the
        #: uploader notes it waiting: uploads.py).
        self.opened = opened
        self.seq = next(_numbers)
        self.started = time.monotonic()

    def physical(self, name: str) -> str:
        return name.replace(self.tag, f"{self.tag}-{self.run}-{self.seq:06d}", 1)

    def next(self) -> None:
        self.seq, self.started = next(_numbers), time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self.started


def copies(logical: Path, store: ObjectStore | None) -> Iterator[bytes]:
    """The contents of every segment of the writer of ``logical`` (a logical file path: its
    writer's pages file, say), here and then in the store: staged files first, then the
    objects (listed after, so that a segment uploaded and deleted meanwhile is met there)."""
    stem, _, ext = logical.name.partition(".")
    pattern = re.compile(re.escape(stem) + r"-[0-9a-z]+-\d{6}\." + re.escape(ext) + "$")
    staged = logical.parent
    names = sorted(p.name for p in staged.glob(f"{stem}-*")) if staged.is_dir() else []
    for name in names:
        if pattern.match(name):
            try:
                yield (staged / name).read_bytes()
            except FileNotFoundError:  # uploaded meanwhile: met in the store
                continue
    if store is not None:
        for name in store.list(stem + "-"):
            if pattern.match(name):
                yield store.get(name)


def staged_crawls(root: Path) -> Iterator[tuple[Path, str]]:
    """``(staging directory, store URL)`` of every s3:// crawl staged under ``root``."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        marker = Path(entry.path) / STORE_FILE
        try:
            url = marker.read_text("utf-8").strip()
        except OSError:
            continue
        if url:
            yield Path(entry.path), url
