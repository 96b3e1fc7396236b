"""The open :class:`~.files.CrawlOutput` of each crawl a process works on, and, for an s3://
crawl, its segments (segments.py) and the marker that tells any uploader on this host where
they go; for a crawl with local output, where this process writes it, said to the crawl's
readers (state/output_places.py) before its first file is."""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from ...state.output_places import Written
from .files import CrawlOutput, process_tag
from .segments import STORE_FILE, Segmenting, run_of


class Outputs:
    """The open :class:`CrawlOutput` of each crawl this process works on (bounded LRU)."""

    def __init__(self, max_open: int = 32, gzip_level: int = 1) -> None:
        self.tag = process_tag()
        #: This process's start time: its segments' run (segments.py).
        self.run = run_of(os.getpid()) or "0"
        self.max_open, self.gzip_level = max_open, gzip_level
        self._open: OrderedDict[str, CrawlOutput] = OrderedDict()
        self._lock = threading.Lock()
        #: Told ``(crawl id, segment file name)`` as each segment file is created (the
        #: uploader, uploads.py, notes it waiting).
        self.on_segment: Callable[[str, str], None] | None = None

    def get(
        self,
        crawl_id: str,
        root: str,
        info: dict[str, str] | None = None,
        store: str = "",
        note: Callable[[Written], None] | None = None,
    ) -> CrawlOutput:
        """``info``: the crawl's warcinfo fields (warcinfo_fields); ``store``: its s3:// URL
        (its files are staged under ``root`` in segments, uploaded: uploads.py); ``note``:
        told where this process writes a crawl with local output, as it opens its files."""
        with self._lock:
            out = self._open.get(crawl_id)
            if out is None:
                directory = Path(root) / crawl_id
                segmenting = None
                if store:
                    segmenting = Segmenting(self.tag, self.run, self._opened(crawl_id))
                    _mark(directory, store)
                elif note is not None:  # before any file: a reader never misses one written
                    note(Written(socket.gethostname(), str(directory.resolve()), os.getpid()))
                out = self._open[crawl_id] = CrawlOutput(
                    directory, self.tag, self.gzip_level, info, segmenting
                )
                while len(self._open) > self.max_open:
                    self._open.popitem(last=False)[1].close()
            self._open.move_to_end(crawl_id)
            return out

    def _opened(self, crawl_id: str) -> Callable[[str], None] | None:
        tell = self.on_segment
        return None if tell is None else lambda name: tell(crawl_id, name)

    def segmented(self) -> list[tuple[str, CrawlOutput]]:
        """The open outputs of s3:// crawls, by crawl id."""
        with self._lock:
            return [(c, o) for c, o in self._open.items() if o.segmenting is not None]

    def close(self) -> None:
        with self._lock:
            for out in self._open.values():
                out.close()
            self._open.clear()


def _mark(directory: Path, store: str) -> None:
    """The staging directory names its store (whole, by rename: a reader never sees half)."""
    marker = directory / STORE_FILE
    if marker.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{STORE_FILE}.{os.getpid()}"
    tmp.write_text(store + "\n", "utf-8")
    os.replace(tmp, marker)
