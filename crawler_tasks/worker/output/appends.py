"""Appends to one crawl's files of one process, each whole or not at all.

Every file is opened once, ``O_APPEND``, and written unbuffered; its size is tracked here
(this process is its only writer). An append of several files that fails on any (a full disk,
a quota, an I/O error) puts every file it touched back to where it ended before and raises
:class:`OutputUnavailable`, so a reader never meets half a record and the next record does not
land on a cut one. What the records say is files.py's; when they count as written, the
fences' (page_appends.py, warc_appends.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from ...errors import OutputUnavailable
from ..process import faults
from .segments import Segmenting


class AppendFiles:
    """The files of one directory this process appends to. Not locked: its owner
    (:class:`~.files.CrawlOutput`) holds the lock an append needs."""

    def __init__(self, directory: Path, segmenting: Segmenting | None = None) -> None:
        self.dir = directory
        #: An s3:// crawl's: its files are written in segments, uploaded once closed; the
        #: names given here stay the logical ones (segments.py).
        self.segmenting = segmenting
        self._files: dict[str, int] = {}  # name -> fd (O_APPEND)
        #: name -> its size, known without asking the kernel (an lseek or fstat releases
        #: the GIL: a hand-off with hundreds of threads): this process is its only writer.
        self._ends: dict[str, int] = {}

    def path(self, name: str) -> Path:
        """Where the file ``name`` (logical) is written now: its segment's, if segmented."""
        seg = self.segmenting
        return self.dir / (seg.physical(name) if seg is not None else name)

    def _fd(self, name: str) -> int:
        fd = self._files.get(name)
        if fd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            path = self.path(name)
            fd = os.open(path, flags, 0o644)
            seg = self.segmenting
            if seg is not None and seg.opened is not None:
                # Known to wait for its upload before a record is in it: a reader that finds
                # nothing waiting has every record in the store. Opened again if not told.
                try:
                    seg.opened(path.name)
                except BaseException:
                    os.close(fd)
                    raise
            self._files[name] = fd
        return fd

    def append(self, writes: list[tuple[str, bytes]]) -> list[tuple[str, int]]:
        """Append each ``(file name, bytes)`` whole, or put every file back and raise; returns
        each file's size before (to undo the append: :meth:`undo`)."""
        done: list[tuple[str, int]] = []
        try:
            for name, data in writes:
                fd = self._fd(name)
                at = self._ends.get(name)
                if at is None:
                    at = os.lseek(fd, 0, os.SEEK_END)
                done.append((name, at))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                self._ends[name] = at + len(data)
                faults.point(f"after_{name.partition('-')[0]}")  # e.g. after_items
        except OSError as exc:
            for name, size in done:
                self.undo(name, size)
            raise OutputUnavailable(str(self.dir), describe(exc)) from exc
        return done

    def undo(self, name: str, size: int) -> None:
        """Back to ``size`` bytes; if even that fails, the file is given up (closed, renamed
        aside by suffix) so that nothing is ever appended after a cut record."""
        fd, self._ends[name] = self._files[name], size
        try:
            os.ftruncate(fd, size)
        except OSError:  # given up: a new file of that name starts empty
            del self._files[name], self._ends[name]
            os.close(fd)
            with contextlib.suppress(OSError):
                path = self.path(name)
                os.rename(path, path.with_name(f"{path.name}.damaged-{time.time():.0f}"))

    def size(self, name: str) -> int:
        """Its size; 0 if not there yet (a writer that appends nothing leaves no file)."""
        if name in self._ends:
            return self._ends[name]
        try:
            if name not in self._files and not self.path(name).exists():
                return 0
            return os.fstat(self._fd(name)).st_size
        except OSError as exc:
            raise OutputUnavailable(str(self.dir), describe(exc)) from exc

    def close(self) -> None:
        for fd in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files.clear()
        self._ends.clear()
        if self.segmenting is not None:  # closed: the next write starts a new segment
            self.segmenting.next()

    def written(self) -> dict[str, int]:
        """The files written now, by their names on disk, and their sizes (the uploader's
        reason to close a segment, and its note of what is staged)."""
        return {self.path(name).name: size for name, size in list(self._ends.items())}


#: What a failed write says in status and logs, by errno.
_WHY = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EIO: "I/O error",
    errno.ENOTDIR: "not a directory",
}


def describe(exc: OSError) -> str:
    return _WHY.get(exc.errno or 0, exc.strerror or type(exc).__name__)
