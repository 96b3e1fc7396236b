"""Where the frontier's chunks live (state/tails.py): a place named by the crawl option
``frontier_store`` (``CRAWLER_FRONTIER_STORE``) that every worker of the crawl reads and writes,
a local directory or ``s3://BUCKET/PREFIX`` (an object store, state/objects/). A chunk is one
object, ``<store>/<crawl id>/<2 hex>/<name>``: 256 directories per crawl on a disk, not one per
host (a directory per queue exhausts inodes: Scrapy #5275).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from ..settings import Settings
from . import objects
from .objects.local import LocalStore
from .options import CrawlOptions


def placed(opts: CrawlOptions, settings: Settings | None) -> CrawlOptions:
    """A new crawl's options with its chunk store fixed (absolute). Without one given:
    ``frontier`` under its output when that is an object store (every machine reads it) or
    when the crawl asked for heads of a given size (``frontier_head`` > 0: it means to spill;
    a cluster of several machines must then share the directory); else none, and the crawl
    keeps every pending URL in Redis, as before tails existed. A default of ``frontier``
    under a local output directory would send each machine's spills to its own disk, where a
    dispatcher on another machine cannot refill them: a URL lost, the crawl never complete."""
    spec = opts.frontier_store
    if not spec:
        base = opts.output or (settings or Settings()).output_dir
        if not (objects.is_url(base) or opts.frontier_head > 0):
            return opts
        spec = f"{base}/frontier" if objects.is_url(base) else str(Path(base) / "frontier")
    return dataclasses.replace(opts, frontier_store=objects.place(spec))


class ChunkStore:
    """Named chunks of one crawl: put (whole: a reader never sees half a chunk), get, delete."""

    def __init__(self, store: objects.ObjectStore) -> None:
        self.objects = store

    @classmethod
    def of(cls, spec: str, crawl_id: str) -> ChunkStore:
        return cls(objects.store_for(objects.place(spec)).child(crawl_id))

    @staticmethod
    def _name(name: str) -> str:
        return f"{name[:2]}/{name}"

    def put(self, name: str, data: bytes) -> None:
        self.objects.put(self._name(name), data)  # the same name again replaces it whole

    def get(self, name: str) -> bytes:
        return self.objects.get(self._name(name))

    def delete(self, name: str) -> None:
        self.objects.delete(self._name(name))

    def clear(self) -> int:
        """Every chunk of the crawl deleted (its end, or its keys forgotten: no index refers to
        them any more), store_mark.py's mark with them; returns how many chunks. A local
        store's emptied directories go too."""
        names = list(self.objects.list())
        for name in names:
            self.objects.delete(name)
        if isinstance(self.objects, LocalStore):
            shutil.rmtree(self.objects.root, ignore_errors=True)
        return sum("/" in n for n in names)

    def size(self) -> tuple[int, int]:
        """(chunks, bytes) in the store now (benchmarks, tests); store_mark.py's mark apart."""
        names = [n for n in self.objects.list() if "/" in n]
        return len(names), sum(self.objects.size(n) for n in names)
