"""What a handle on one crawl holds and finds: its Redis side (the store, its key names and
options), its status, and its output directory with the records there. The verbs a user
calls on a crawl (watching it, steering it) are :class:`~crawler_tasks.surface.crawl.Crawl`'s,
built on this."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from ..errors import UnknownCrawl
from ..settings import Settings, load
from ..state import connection, objects, registry
from ..state.connection import check_redis_url
from ..state.formats import Status
from ..state.keys import CrawlKeys
from ..state.objects import ObjectStore
from ..state.options import CrawlOptions
from ..state.stats import Stats
from ..state.store import CrawlStore, RedisHandle

if TYPE_CHECKING:
    from ..worker.output.read import Place


def connect_settings(broker: str | None) -> Settings:
    """Settings from the environment, with ``broker`` (checked) as broker and state URL."""
    if broker is None:
        return load()
    check_redis_url(broker)
    return load(broker_url=broker, redis_url="")


class CrawlHandle:
    """A handle on one crawl; cheap to create, holds no state but its id and clients."""

    def __init__(
        self,
        crawl_id: str,
        *,
        broker: str | None = None,
        settings: Settings | None = None,
        client: redis.Redis | None = None,
        store: CrawlStore | None = None,
    ) -> None:
        self.id = crawl_id
        self.settings = settings or connect_settings(broker)
        self.client = client or connection.connect(self.settings.state_url)
        self._r = (
            store.r
            if store is not None
            else RedisHandle.connect(self.client, self.settings.key_prefix)
        )
        self.keys = self._r.keys
        self._store = store

    def __repr__(self) -> str:
        return f"<Crawl {self.id}>"

    @property
    def store(self) -> CrawlStore:
        """The crawl's Redis side; UnknownCrawl (a KeyError) if the crawl expired or never started."""
        if self._store is None:
            opts = CrawlStore.read_options(self._r, self.id)
            if opts is None:
                raise UnknownCrawl(self.id)
            self._store = CrawlStore(self._r, opts)
        return self._store

    @property
    def ck(self) -> CrawlKeys:
        """The crawl's key names (crawl-wide ones only while the crawl is unknown)."""
        try:
            return self.store.ck
        except UnknownCrawl:
            return self.keys.crawl(self.id)

    @property
    def options(self) -> CrawlOptions:
        return self.store.opts

    @property
    def stats(self) -> Stats:
        """The crawl's counters, rates and figures (typed: state/figures.py)."""
        return self.store.stats

    @property
    def finished(self) -> bool:
        return self.status.final

    @property
    def status(self) -> Status:
        try:
            return self.store.lifecycle.status()
        except UnknownCrawl:  # not started yet, or expired
            return Status.UNKNOWN

    def exists(self) -> bool:
        return registry.exists(self._r, self.id)

    # --- its files ---------------------------------------------------------------------------
    @property
    def output_dir(self) -> Path:
        """Where this crawl's files are: its ``output`` if it set one, else this host's
        ``CRAWLER_OUTPUT_DIR`` (each worker writes under its own; see docs/guides/output.md)."""
        root = objects.local_root(self.options.output, self.settings.output_dir)
        return Path(root).resolve() / self.id

    @property
    def files(self) -> Path | ObjectStore:
        """Where its records are read: the output directory, or an s3:// crawl's objects
        (from any machine)."""
        if objects.is_url(self.options.output):
            return objects.store_for(self.options.output).child(self.id)
        return self.output_dir

    def readable_files(self, partial: bool = False) -> Place:
        """Where its records are read on this host (surface/places.py): every directory its
        processes wrote to that this host can read, or its objects. OutputUnreadable names
        the directories this host cannot read (another host's, or gone); with ``partial``
        the rest is read, and a PartialOutput warning names what was left out."""
        import warnings

        from ..errors import PartialOutput
        from .places import find

        found = find(self)
        place = found.readable(self.id, partial)
        if found.unread:
            left_out = "; ".join(found.unread)
            warnings.warn(PartialOutput(f"crawl {self.id}: left out {left_out}"), stacklevel=3)
        return place

    def pages(self, latest: bool = True, partial: bool = False) -> Iterator[dict[str, Any]]:
        """Records of this crawl's ``pages-*.jsonl``, from every directory its processes wrote
        to (or its objects in a store). The files are append-only logs: a URL replayed by
        :meth:`retry_failed` has a record for each final state it reached; with ``latest``
        (default) only its last one is yielded (by ``fetched_at``, then file order).
        ``crawler export --pages`` writes the same records. OutputUnreadable if some of its
        directories cannot be read on this host, unless ``partial`` (then PartialOutput, a
        warning, names them)."""
        from ..worker.output.read import latest_pages, read_pages  # files: not for the dashboard

        place = self.readable_files(partial)
        return latest_pages(place) if latest else read_pages(place)

    def items(self, latest: bool = True, partial: bool = False) -> Iterator[dict[str, Any]]:
        """Lines of this crawl's ``items-*.jsonl`` (found as :meth:`pages` finds its files):
        ``{"url", "item", "rid"}``. With ``latest`` (default), only the items of each URL's
        last record (a page replayed by :meth:`retry_failed` has the items of each of its
        records). ``crawler export --items`` writes their ``item`` dicts."""
        from ..worker.output.read import latest_items, read_pages

        place = self.readable_files(partial)
        if latest:
            return latest_items(place)
        return read_pages(place, kind="items")
