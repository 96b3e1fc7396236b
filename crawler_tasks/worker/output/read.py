"""Reading a crawl's output files back (``crawler export``, ``Crawl.pages()``): every writer's
``pages-*.jsonl`` and ``items-*.jsonl`` merged, lines cut by a writer's death skipped. The
files are written by output.py; :func:`unwritable` tells, before any is, whether they can be."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ...state.objects import ObjectStore


class Directories(tuple[Path, ...]):
    """The directories where a crawl's processes wrote its files (workers started in
    different directories, or on hosts sharing a volume: state/output_places.py), read as
    one place. Each writer's files have names of their own, so no file is in two of them."""


#: A crawl's files: its directory (or several), or (an s3:// crawl) its objects.
Place = str | os.PathLike[str] | ObjectStore | Directories


def local_files(place: str | os.PathLike[str] | Directories, pattern: str) -> list[Path]:
    """The files matching ``pattern`` of a crawl's directory (or directories), by name."""
    directories = place if isinstance(place, Directories) else (Path(place),)
    found = [path for d in directories for path in d.glob(pattern)]
    return sorted(found, key=lambda path: (path.name, str(path)))


def read_pages(directory: Place, kind: str = "pages") -> Iterator[dict[str, Any]]:
    """Every record of every ``pages-*.jsonl`` (or ``items-*.jsonl``) of one crawl's
    directory (or directories), or of its objects in a store (each uploaded segment's). A
    line cut short by the death of its writer is skipped."""
    if isinstance(directory, ObjectStore):
        for name in directory.list(f"{kind}-"):
            if name.endswith(".jsonl"):
                with directory.open(name) as stream:
                    yield from _records(_lines(stream))
        return
    for path in local_files(directory, f"{kind}-*.jsonl"):
        with open(path, "rb") as f:
            yield from _records(f)


def _records(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for raw in lines:
        if raw.endswith(b"\n") and raw.strip():
            yield json.loads(raw.decode("utf-8", "surrogateescape"))


def _lines(stream: BinaryIO, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A stream's lines, each with its newline; the last without one if it was cut."""
    rest = b""
    while True:
        data = stream.read(chunk)
        if not data:
            break
        *whole, rest = (rest + data).split(b"\n")
        for line in whole:
            yield line + b"\n"
    if rest:
        yield rest


def latest_pages(directory: Place) -> Iterator[dict[str, Any]]:
    """The last record of each URL, merged from every writer's ``pages-*.jsonl``: the files are
    append-only logs, and a URL replayed by ``retry-failed`` has a record per final state (the
    last by ``fetched_at``, then file order)."""
    last: dict[str, dict[str, Any]] = {}
    for record in read_pages(directory):
        old = last.get(record["url"])
        if old is None or (record.get("fetched_at") or 0) >= (old.get("fetched_at") or 0):
            last[record["url"]] = record
    return iter(last.values())


def latest_items(directory: Place) -> Iterator[dict[str, Any]]:
    """The ``items-*.jsonl`` lines of each URL's last record (see :func:`latest_pages`)."""
    rids = {r.get("rid") for r in latest_pages(directory)}
    return (line for line in read_pages(directory, "items") if line.get("rid") in rids)


def unwritable(directory: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written under ``directory`` on this host (None if they can), as
    far as can be known without writing: its nearest existing ancestor must be a directory
    this process may write in, on a file system mounted read-write."""
    path = Path(directory).absolute()
    while not path.exists():
        if path == path.parent:
            return "no such place"
        path = path.parent
    if not path.is_dir():
        return f"{path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        return f"{path}: " + ("read-only file system" if read_only else "permission denied")
    return None
