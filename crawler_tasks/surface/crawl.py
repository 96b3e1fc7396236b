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
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis

from ..errors import ConfigError, RedisFull
from ..settings import Settings
from ..state import connection, objects, registry
from ..state import store as stores
from ..state.ceilings import read as read_ceilings
from ..state.domain_pace import effective_rate
from ..state.figures import Listed, Live, Progress
from ..state.formats import Counter
from ..state.frontier import backlog
from ..state.health import no_room_for
from ..state.keys import Keys
from ..state.options import CrawlOptions
from ..state.outlook import read_outlook
from ..state.store import RedisHandle, new_crawl_id
from ..state.summary import Summary
from ..state.watch_figures import Detail
from ..web.seeds import check_seeds
from .handle import CrawlHandle, connect_settings

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
    from ..errors import BrokerUnreachable
    from ..state.connection import UNAVAILABLE
    from .probe import problem

    settings = settings or connect_settings(broker)
    opts = plan(seeds, settings, crawl_id=crawl_id, output=output, rates=rates, **options)
    try:
        crawl = launch(opts, settings=settings, client=client)
    except UNAVAILABLE as exc:  # nothing written: the first write is what failed
        raise BrokerUnreachable(problem(settings) or f"broker unreachable: {exc}") from None
    _warn_if_unserved(crawl, settings)
    return crawl


def _warn_if_unserved(crawl: Crawl, settings: Settings) -> None:
    """A crawl no worker process serves (none beat within the dead threshold) is said in one
    warning line: it waits, ``running``, until workers start."""
    import warnings

    from ..errors import NoWorkers
    from ..redaction import redact
    from ..state import workers

    if workers.alive(crawl.client, crawl.store.r.keys, settings.worker_dead_seconds):
        return
    warnings.warn(
        NoWorkers(
            f"crawl {crawl.id} is stored, but no worker process runs at "
            f"{redact(settings.broker_url)}: it waits until workers start "
            "(docs/operations/workers.md)"
        ),
        stacklevel=3,
    )


def plan(
    seeds: Iterable[str],
    settings: Settings,
    *,
    output: str | os.PathLike[str] | None = None,
    **options: Any,
) -> CrawlOptions:
    """A new crawl's options from what a user gave (start_crawl keywords, ``crawler crawl``
    flags), checked once: ConfigError or InvalidSeed before anything is written."""
    # Without an explicit output, each worker writes under its own CRAWLER_OUTPUT_DIR; an
    # s3:// output is kept as a URL, any other URL refused (never a directory named "gs:").
    output_dir = objects.place(str(output)) if output else ""
    opts = stores.plan(settings, seeds, output=output_dir, **options)
    if opts.extract:
        check_hook_here(opts.extract)
    return opts


def check_hook_here(path: str) -> None:
    """A hook whose module this process can import is checked now (it must name a function);
    one it cannot import is the workers' to import (docs/guides/extraction.md: where hooks run)."""
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
        registry.unregister(r, opts)
        raise RedisFull(_full_message(client, opts)) from None
    return Crawl(store.id, settings=settings, client=client, store=store)


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


class Crawl(CrawlHandle):
    """A handle on one crawl (:class:`~crawler_tasks.surface.handle.CrawlHandle`: its store,
    status and files) and what a user does with it: watch it (its figures, typed in
    state/figures.py, and their JSON form), wait for it, steer it."""

    # --- watching ----------------------------------------------------------------------------
    def read_progress(self, detail: Detail | None = None) -> Progress:
        """The crawl's figures now, typed, with their outlook (the busiest hosts' backlog,
        those down, Redis's memory, render decisions) and ``detail`` if given (``crawler
        status``'s: surface/figures.py)."""
        s = self.settings
        outlook = read_outlook(self.store, s.admission_memory_fraction, s.worker_dead_seconds)
        return self.stats.progress(outlook, detail)

    def progress(self) -> dict[str, Any]:
        """The figures of :meth:`read_progress` as JSON (what ``watch --json`` prints)."""
        return self.read_progress().to_json()

    def bloom(self) -> dict[str, float]:
        return self.store.bloom.stats()

    def domains(self, top: int = 20) -> list[dict[str, Any]]:
        names = [d for d, _ in backlog(self.store.client, self.store.ck, top)]
        shared = read_ceilings(self.client, self.store.r.keys)
        infos = self.store.politeness.domains(names, ceilings=shared)
        for info in infos:
            info["rate"] = effective_rate(info, self.options.rate)
        return infos

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> dict[str, Any]:
        """Block until the crawl is finished (its counter reached zero); returns the summary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if deadline is not None and time.monotonic() > deadline:
                p = self.stats.progress()
                shown = (Counter.DONE, Counter.QUEUED, Live.IN_FLIGHT, Live.RETRYING)
                left = {"status": p.status.value, **{f.value: p[f] for f in shown}}
                raise TimeoutError(f"crawl {self.id} not finished after {timeout}s: {left}")
            time.sleep(poll)
        return self.summary()

    def read_summary(self) -> Summary:
        """The crawl's ``summary.json`` once the finishing worker has written it (the status
        flips just before), where it wrote it if that is on this host, else the same figures
        computed from Redis now."""
        if objects.is_url(self.options.output):
            # An s3:// crawl's summary.json is an object of its store, PUT from these same
            # figures before the status flipped (worker/visit/recorder.py); never a file here,
            # so polling for one cost every wait() 2 s (bench/README.md). Read from Redis: no
            # GET, and no S3 credentials needed where the crawl is only watched.
            return self.stats.summary()
        state = self.store.lifecycle.read()
        path = self.output_dir / "summary.json"
        if state.summary_path and not objects.is_url(state.summary_path):
            # The finisher's own directory, which may not be this caller's (docs/guides/output.md).
            path = Path(state.summary_path)
        here = not state.summary_host or state.summary_host == socket.gethostname()
        finished_at = state.finished_at or 0.0
        for _ in range(40 if finished_at and here else 0):
            if path.exists():
                written = Summary.from_json(json.loads(path.read_text("utf-8")))
                # After retry_failed() the file of the first finish is still there.
                if finished_at and (written.finished_at or 0) >= finished_at - 1e-3:
                    return written
            time.sleep(0.05)
        return self.stats.summary()

    def summary(self) -> dict[str, Any]:
        """:meth:`read_summary` as JSON: what ``summary.json`` holds."""
        return self.read_summary().to_json()

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
                        s = self.read_summary()
                        ts = s.finished_at or time.time()
                        yield {
                            "event": "crawl_finished",
                            "crawl_id": self.id,
                            "ts": ts,
                            "summary": s.to_json(),
                            "replayed": True,
                        }
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
        return registry.forget(self._r, self.id, force, self.settings.worker_dead_seconds)

    def failed(self) -> list[dict[str, Any]]:
        self.options  # noqa: B018  (UnknownCrawl)
        return self.store.dead_letters.all()

    def retry_failed(self) -> int:
        """Put every dead-lettered URL back into the frontier; returns how many."""
        records = self.failed()
        if not records:
            return 0
        self.store.dead_letters.replay(records)
        admitted = self.store.frontier.admit(
            ((r["url"], int(r["depth"])) for r in records), force=True
        )
        self.store.lifecycle.reopen()
        return admitted.admitted


def list_crawls(client: redis.Redis, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    """The newest crawls: id, status, seeds, started_at and their progress counters; one that
    cannot be read is an entry with ``unreadable`` (why) instead (registry.listing)."""
    return [entry.to_json() for entry in listed(client, keys, limit)]


def listed(client: redis.Redis, keys: Keys, limit: int = 50) -> list[Listed]:
    """:func:`list_crawls`, typed (``crawler list``)."""
    return registry.listing(RedisHandle.connect(client, keys.prefix), limit)
