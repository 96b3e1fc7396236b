"""Starting and steering crawls from Python::

    >>> from crawler_tasks import start_crawl
    >>> crawl = start_crawl(["https://example.org/"], max_depth=3, max_pages=5000)
    >>> crawl.progress()
    >>> crawl.wait()

``start_crawl`` only writes the crawl's options and seeds to Redis; workers started with
``celery -A crawler_tasks worker`` on any host do the rest.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis

from ..errors import ConfigError, RedisFull, UnknownCrawl
from ..settings import Settings, load
from ..state import connection
from ..state import store as stores
from ..state.ceilings import read as read_ceilings
from ..state.connection import check_redis_url
from ..state.formats import Status
from ..state.health import memory, no_room_for
from ..state.keys import CrawlKeys, Keys
from ..state.options import CrawlOptions
from ..state.politeness import effective_rate
from ..state.stats import RATE_WINDOW, Stats
from ..state.store import CrawlStore, RedisHandle, check_seeds, new_crawl_id

__all__ = [
    "Crawl",
    "start_crawl",
    "plan",
    "launch",
    "list_crawls",
    "check_seeds",
    "new_crawl_id",
]


def start_crawl(
    seeds: Iterable[str],
    *,
    broker: str | None = None,
    settings: Settings | None = None,
    client: redis.Redis | None = None,
    crawl_id: str | None = None,
    output: str | os.PathLike[str] | None = None,
    rates: dict[str, float] | None = None,
    **options: Any,
) -> Crawl:
    """Validate, store and seed a new crawl; returns its handle at once.

    ``broker`` is the Redis URL of the cluster (default: ``$CRAWLER_BROKER_URL``, else
    ``redis://localhost:6379/0``). ``output`` is a directory every worker writes to (a shared
    volume); without it each worker writes under its own ``CRAWLER_OUTPUT_DIR``.
    ``options`` are :class:`CrawlOptions` fields: max_depth, max_pages, allowed_domains,
    include, exclude, priority, order, allow_private_networks, rate, burst, concurrency,
    obey_robots, sitemaps, schedule, on_finished... Unknown names and out-of-range values raise
    :class:`~crawler_tasks.errors.ConfigError` before anything is written.
    """
    settings = settings or connect_settings(broker)
    opts = plan(seeds, settings, crawl_id=crawl_id, output=output, rates=rates, **options)
    return launch(opts, settings=settings, client=client)


def plan(
    seeds: Iterable[str],
    settings: Settings,
    *,
    output: str | os.PathLike[str] | None = None,
    **options: Any,
) -> CrawlOptions:
    """A new crawl's options from what a user gave (start_crawl keywords, ``crawler crawl``
    flags), checked once: ConfigError or InvalidSeed before anything is written."""
    # Without an explicit output, each worker writes under its own CRAWLER_OUTPUT_DIR.
    output_dir = str(Path(output).resolve()) if output else ""
    opts = stores.plan(settings, seeds, output=output_dir, **options)
    if opts.extract:
        check_hook_here(opts.extract)
    return opts


def check_hook_here(path: str) -> None:
    """A hook whose module this process can import is checked now (it must name a function);
    one it cannot import is the workers' to import (README: where hooks run)."""
    import importlib
    import importlib.util

    module, _, name = path.partition(":")
    try:
        if importlib.util.find_spec(module) is None:
            return
    except (ImportError, ValueError):  # a parent package missing here: the workers' affair
        return
    try:
        obj: Any = importlib.import_module(module)
    except Exception as exc:
        raise ConfigError(f"extract {path}: importing {module} failed: {exc!r}") from None
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"extract {path}: {module} has no {name!r}")
    if not callable(obj):
        raise ConfigError(f"extract {path}: {name} is not a function")


def launch(
    opts: CrawlOptions,
    *,
    settings: Settings,
    client: redis.Redis | None = None,
    more_seeds: Iterable[str] = (),
) -> Crawl:
    """Store and seed a crawl :func:`plan` made (and ``more_seeds``, checked and normalised:
    a seeds file's): RedisFull (nothing left behind) if Redis cannot hold it."""
    client = client or connection.connect(settings.state_url)
    connection.check_broker(settings.broker_url, client)
    r = RedisHandle.connect(client, settings.key_prefix)
    if no_room_for(client, opts.bloom.upfront_bytes):
        raise RedisFull(_full_message(client, opts))
    try:
        store = stores.start(r, opts, more_seeds=more_seeds)
    except redis.exceptions.OutOfMemoryError:
        stores.unregister(r, opts)
        raise RedisFull(_full_message(client, opts)) from None
    return Crawl(store.id, settings=settings, client=client, store=store)


def connect_settings(broker: str | None) -> Settings:
    """Settings from the environment, with ``broker`` (checked) as broker and state URL."""
    if broker is None:
        return load()
    check_redis_url(broker)
    return load(broker_url=broker, redis_url="")


def _full_message(client: redis.Redis, opts: CrawlOptions) -> str:
    info, bloom = client.info("memory"), opts.bloom
    mb = 1024 * 1024
    bounded = bool(opts.max_pages)
    why = f"its dedupe filter takes {bloom.upfront_bytes / mb:.1f} MB up front" + (
        "" if bounded else f" (no max_pages: sized for {bloom.capacity:,} URLs)"
    )
    return (
        f"Redis cannot hold this crawl: {info.get('used_memory', 0) / mb:.1f} MB used of "
        f"maxmemory {int(info.get('maxmemory', 0)) / mb:.1f} MB, and {why}. Raise maxmemory, "
        "free memory" + ("" if bounded else ", or set max_pages (or CRAWLER_BLOOM_CAPACITY)")
    )


class Crawl:
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
        """The crawl's counters and progress figures."""
        return self.store.stats

    @property
    def output_dir(self) -> Path:
        """Where this crawl's files are: its ``output`` if it set one, else this host's
        ``CRAWLER_OUTPUT_DIR`` (each worker writes under its own; see the README)."""
        return Path(self.options.output or self.settings.output_dir).resolve() / self.id

    # --- watching ----------------------------------------------------------------------------
    def progress(self) -> dict[str, Any]:
        opts = self.options
        p = self.stats.progress()
        over = Status(p["status"]).final
        # Pages/s of the last RATE_WINDOW s: a young crawl has not lived that long yet.
        if 0 < p["elapsed_s"] < RATE_WINDOW and not over:
            p["recent_pages_per_s"] *= RATE_WINDOW / max(p["elapsed_s"], 1.0)
        # ETA of the work known now (outstanding is exact; links found later add to it).
        if p["recent_pages_per_s"] > 0 and not p["paused"] and not over:
            left = max(opts.max_pages - p["done"], 0) if opts.max_pages else p["outstanding"]
            p["eta_s"] = round(min(left, p["outstanding"]) / p["recent_pages_per_s"], 1)
        p["backlog"] = self.store.frontier.backlog(5)
        p["hosts_down"] = self._hosts_down([d for d, _ in p["backlog"]])
        p["summary_path"] = self.store.lifecycle.read().summary_path
        # Workers wait (and cannot record why) while Redis is full: ask Redis itself.
        mem = memory(self.client)
        p["redis_oom"] = mem is not None and mem.refuses_writes()
        fraction = self.settings.admission_memory_fraction
        p["admission_paused"] = mem is not None and mem.over(fraction)
        p["redis_memory"] = mem.as_dict() if mem is not None else None
        # render="auto": each host's decision and its evidence (state/render_plan.py).
        renders = opts.render != "never" or opts.render_hosts
        p["render_hosts"] = self.store.render_plan.hosts() if renders else {}
        return p

    def _hosts_down(self, names: list[str]) -> list[dict[str, Any]]:
        """Of the busiest hosts, those whose circuit is open: since when, next probe when."""
        keep = ("domain", "down_since", "next_probe_s")
        return [
            {k: d[k] for k in keep}
            for d in self.store.politeness.domains(names)
            if d["down_since"] is not None
        ]

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
        return stores.exists(self._r, self.id)

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> dict[str, Any]:
        """Block until the crawl is finished (its counter reached zero); returns the summary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if deadline is not None and time.monotonic() > deadline:
                p = self.stats.progress()
                left = {k: p[k] for k in ("status", "done", "queued", "in_flight", "retrying")}
                raise TimeoutError(f"crawl {self.id} not finished after {timeout}s: {left}")
            time.sleep(poll)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """The crawl's ``summary.json`` once the finishing worker has written it (the status
        flips just before), else the same figures computed from Redis now."""
        path = self.output_dir / "summary.json"
        finished_at = self.store.lifecycle.read().finished_at or 0.0
        for _ in range(40 if finished_at else 0):
            if path.exists():
                data = dict(json.loads(path.read_text("utf-8")))
                # After retry_failed() the file of the first finish is still there.
                if finished_at and (data.get("finished_at") or 0) >= finished_at - 1e-3:
                    return _without_zeros(data)
            time.sleep(0.05)
        return _without_zeros(self.stats.summary())

    def pages(self, latest: bool = True) -> Iterator[dict[str, Any]]:
        """Records of this crawl's ``pages-*.jsonl`` (on this host). The files are append-only
        logs: a URL replayed by :meth:`retry_failed` has a record for each final state it
        reached; with ``latest`` (default) only its last one is yielded (by ``fetched_at``,
        then file order). ``crawler export --pages`` writes the same records."""
        from ..worker.output.read import latest_pages, read_pages  # files: not for the dashboard

        return latest_pages(self.output_dir) if latest else read_pages(self.output_dir)

    def items(self, latest: bool = True) -> Iterator[dict[str, Any]]:
        """Lines of this crawl's ``items-*.jsonl`` (on this host): ``{"url", "item", "rid"}``.
        With ``latest`` (default), only the items of each URL's last record (a page replayed
        by :meth:`retry_failed` has the items of each of its records). ``crawler export
        --items`` writes their ``item`` dicts."""
        from ..worker.output.read import latest_items, read_pages

        if latest:
            return latest_items(self.output_dir)
        return read_pages(self.output_dir, kind="items")

    def bloom(self) -> dict[str, float]:
        return self.store.bloom.stats()

    def domains(self, top: int = 20) -> list[dict[str, Any]]:
        names = [d for d, _ in self.store.frontier.backlog(top)]
        shared = read_ceilings(self.client, self.store.r.keys)
        infos = self.store.politeness.domains(names, ceilings=shared)
        for info in infos:
            info["rate"] = effective_rate(info, self.options.rate)
        return infos

    def events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Live events of this crawl until ``crawl_finished`` (or ``timeout`` s of silence);
        a crawl already finished yields its ``crawl_finished`` (rebuilt) and ends."""
        # No existence check: listening to a crawl id before start_crawl(crawl_id=...) is fine.
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.ck.events)
        try:
            while True:
                # Subscribed first, then checked: a crawl_finished published in between is
                # not lost, and a crawl finished long ago (its event gone) ends at once.
                msg = pubsub.get_message(timeout=timeout if timeout is not None else 1.0)
                if msg is None:
                    if self.finished:  # its crawl_finished went out before we listened: rebuilt
                        s = self.summary()
                        ts = s.get("finished_at") or time.time()
                        yield {"event": "crawl_finished", "crawl_id": self.id, "ts": ts,
                               "summary": s, "replayed": True}  # fmt: skip
                        return
                    if timeout is not None:
                        return
                    continue
                event = json.loads(msg["data"])
                yield event
                if event.get("event") == "crawl_finished":
                    return
        finally:
            pubsub.close()

    # --- steering ----------------------------------------------------------------------------
    def pause(self) -> bool:
        """Stop releasing this crawl's URLs (in-flight ones finish). False if it is finished."""
        return self.store.lifecycle.pause()  # UnknownCrawl: nothing is written for an unknown id

    def resume(self) -> bool:
        return self.store.lifecycle.resume()

    def cancel(self) -> bool:
        """Drop pending work unfetched; the crawl finishes as ``cancelled``. False if it was
        finished already."""
        return self.store.lifecycle.cancel()

    def forget(self, force: bool = False) -> int:
        """Delete the crawl's keys (its files stay); refused for a crawl that workers still
        serve unless ``force`` (stranded and unreadable ones go). Returns how many keys went."""
        self._store = None
        return stores.forget(self._r, self.id, force, self.settings.worker_dead_seconds)

    def failed(self) -> list[dict[str, Any]]:
        self.options  # noqa: B018  (UnknownCrawl)
        return self.store.ledger.dead_letters()

    def retry_failed(self) -> int:
        """Put every dead-lettered URL back into the frontier; returns how many."""
        records = self.failed()
        if not records:
            return 0
        self.store.ledger.replay_dead_letters(records)
        admitted = self.store.frontier.admit(
            ((r["url"], int(r["depth"])) for r in records), force=True
        )
        self.store.lifecycle.reopen()
        return admitted.admitted


def _without_zeros(summary: dict[str, Any]) -> dict[str, Any]:
    """retry_failed() takes replayed URLs off their failure counters: drop the zeros left."""
    for name in ("failures", "skipped", "changes", "status_codes"):
        if isinstance(summary.get(name), dict):
            summary[name] = {k: v for k, v in summary[name].items() if v}
    return summary


def list_crawls(client: redis.Redis, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    """The newest crawls: id, status, seeds, started_at and their progress counters; one that
    cannot be read is an entry with ``unreadable`` (why) instead (store.listing)."""
    return stores.listing(RedisHandle.connect(client, keys.prefix), limit)
