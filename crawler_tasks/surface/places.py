"""Where the readers of a crawl (``crawler export``, ``Crawl.pages()``, ``Crawl.items()``,
the WACZ export) find its files on this host.

An s3:// crawl's files are its objects, read from any machine. A crawl with local output is
in every directory its processes wrote to: each notes its host, directory and pid before its
first file (state/output_places.py), so workers started in different directories (the
README's per-host commands, a render worker of its own) are all found. A directory noted on
another host is read here only if it holds that host's writers' files (a volume both hosts
mount: compose's ``/data``, NFS); one that cannot be read is named, and a reader refuses to
answer with the rest unless asked to (``partial``): an export that misses a directory
without a word is the silent partial export this exists to prevent.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OutputUnreadable
from ..state import objects
from ..state.output_places import OutputPlaces, Written
from ..worker.output.read import Directories, Place


@dataclass(frozen=True)
class Found:
    """A crawl's files as this host sees them: ``place`` to read, ``unread`` the directories
    that cannot be read here (one line each: "DIR on HOST: why")."""

    place: Place
    unread: tuple[str, ...] = ()

    def readable(self, crawl_id: str, partial: bool = False) -> Place:
        """``place``; OutputUnreadable if a directory cannot be read and ``partial`` is off."""
        if self.unread and not partial:
            raise OutputUnreadable(crawl_id, list(self.unread))
        return self.place

    @property
    def where(self) -> str:
        """The directories read, in words (for messages)."""
        if isinstance(self.place, Directories):
            return ", ".join(str(d) for d in self.place) or "no directory readable here"
        return str(getattr(self.place, "url", self.place))


def find(crawl: Any) -> Found:
    """Where ``crawl`` (a CrawlHandle)'s records are read on this host."""
    if objects.is_url(crawl.options.output):
        return Found(crawl.files)
    written = OutputPlaces(crawl.client, crawl.ck.places).read()
    if not written:  # nothing written yet, or by a version that did not say where
        return Found(crawl.output_dir)
    readable, unread = sort_out(written, socket.gethostname())
    return Found(Directories(readable), tuple(unread))


def sort_out(written: list[Written], here: str) -> tuple[list[Path], list[str]]:
    """The directories of ``written`` this host (named ``here``) reads, each once (a
    directory two processes or two hosts noted, or one reached by two paths), and a line
    for each it cannot read."""
    writers: dict[tuple[str, str], list[Written]] = defaultdict(list)
    for place in written:
        writers[(place.host, place.dir)].append(place)
    readable: list[Path] = []
    unread: list[str] = []
    seen: set[tuple[int, int]] = set()
    for (host, directory), places in sorted(writers.items()):
        path = Path(directory)
        why = _why_unreadable(path, host, places, here)
        if why:
            unread.append(f"{directory} on {'this host' if host == here else host}: {why}")
            continue
        stat = path.stat()
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            readable.append(path)
    return readable, unread


def _why_unreadable(path: Path, host: str, places: list[Written], here: str) -> str:
    """Why ``path`` (noted by ``places``, processes of ``host``) is not read here, or ''."""
    if host == here:
        if not path.is_dir():
            return "no such directory (moved or deleted?)"
        if not os.access(path, os.R_OK | os.X_OK):
            return "permission denied"
        return ""
    # Another host's directory is this host's too only if it holds that host's files (a
    # shared volume): the same path on this host's own disk is not where they are.
    if not path.is_dir() or not any(_has_files(path, p.tag) for p in places):
        return "another host's directory, not readable here"
    return ""


def _has_files(path: Path, tag: str) -> bool:
    try:
        return any(path.glob(f"*-{tag}.*"))
    except OSError:
        return False
