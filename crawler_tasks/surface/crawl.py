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

from ..errors import RedisFull
from ..settings import Settings, load
from ..state import store as stores
from ..state.health import refuses_writes
from ..state.keys import Keys
from ..state.ledger import Ledger
from ..state.options import CrawlOptions
from ..state.politeness import effective_rate
from ..state.store import CrawlStore, Redis, check_seeds, new_crawl_id
from ..worker.output import read_pages

__all__ = ["Crawl", "start_crawl", "list_crawls", "check_seeds", "new_crawl_id"]

FINAL_STATUSES = ("finished", "cancelled")


def start_crawl(
    seeds: Iterable[str],
    *,
    settings: Settings | None = None,
    client: redis.Redis | None = None,
    crawl_id: str | None = None,
    output: str | os.PathLike[str] | None = None,
    rates: dict[str, float] | None = None,
    **options: Any,
) -> Crawl:
    """Validate, store and seed a new crawl; returns its handle at once.

    ``options`` are :class:`CrawlOptions` fields: max_depth, max_pages, allowed_domains,
    include, exclude, priority, order, allow_private_networks, rate, burst, concurrency,
    obey_robots, sitemaps, schedule, on_finished...
    """
    settings = settings or load()
    client = client or redis.Redis.from_url(settings.state_url)
    r = Redis.connect(client, settings.key_prefix)
    if rates:
        options["rates"] = rates
    output_dir = str(Path(output or settings.output_dir).resolve())
    seeds, crawl_id = list(seeds), crawl_id or new_crawl_id()
    urls = check_seeds(seeds, bool(options.get("allow_private_networks", False)))
    bloom = CrawlOptions.build(crawl_id, tuple(urls), settings, time.time(), **options).bloom
    if _no_room(client, bloom.bits // 8):
        raise RedisFull(_full_message(client, bloom, options))
    try:
        store = stores.start(r, settings, seeds, crawl_id=crawl_id, output=output_dir, **options)
    except redis.exceptions.OutOfMemoryError:
        _unregister(client, r.keys, crawl_id, options.get("schedule"))
        raise RedisFull(_full_message(client, bloom, options)) from None
    return Crawl(store.id, settings=settings, client=client, store=store)


def _no_room(client: redis.Redis, need: int) -> bool:
    """True if Redis refuses writes, or would once the crawl's dedupe filter (``need`` bytes,
    allocated by its first admit) is in: a Lua script that starts under ``maxmemory`` may end
    far above it, so check before."""
    if refuses_writes(client):
        return True
    try:
        info = client.info("memory")
    except redis.ResponseError:  # INFO forbidden (managed Redis): let the writes tell
        return False
    limit = int(info.get("maxmemory", 0) or 0)
    return bool(limit) and int(info.get("used_memory", 0)) + need > limit


def _full_message(client: redis.Redis, bloom: Any, options: dict[str, Any]) -> str:
    info = client.info("memory")
    mb = 1024 * 1024
    bounded = bool(options.get("max_pages"))
    why = f"its dedupe filter takes {bloom.bits / 8 / mb:.1f} MB up front" + (
        "" if bounded else f" (no max_pages: sized for {bloom.capacity:,} URLs)"
    )
    return (
        f"Redis cannot hold this crawl: {info.get('used_memory', 0) / mb:.1f} MB used of "
        f"maxmemory {int(info.get('maxmemory', 0)) / mb:.1f} MB, and {why}. Raise maxmemory, "
        "free memory" + ("" if bounded else ", or set max_pages (or CRAWLER_BLOOM_CAPACITY)")
    )


def _unregister(client: redis.Redis, keys: Keys, crawl_id: str, schedule: str | None) -> None:
    """Undo a registration cut short by a full Redis (deleting is allowed at maxmemory)."""
    ck = keys.crawl(crawl_id)
    pipe = client.pipeline(transaction=False)  # a full Redis refuses MULTI
    pipe.delete(ck.config, ck.state, ck.rates)
    pipe.zrem(keys.crawls, crawl_id)
    if schedule:
        pipe.zrem(keys.schedule_runs(schedule), crawl_id)
    pipe.srem(keys.running, crawl_id)
    pipe.execute()


class Crawl:
    """A handle on one crawl; cheap to create, holds no state but its id and clients."""

    def __init__(
        self,
        crawl_id: str,
        *,
        settings: Settings | None = None,
        client: redis.Redis | None = None,
        store: CrawlStore | None = None,
    ) -> None:
        self.id = crawl_id
        self.settings = settings or load()
        self.client = client or redis.Redis.from_url(self.settings.state_url)
        self._r = (
            store.r if store is not None else Redis.connect(self.client, self.settings.key_prefix)
        )
        self.keys = self._r.keys
        self.ck = self.keys.crawl(crawl_id)
        self._store = store

    def __repr__(self) -> str:
        return f"<Crawl {self.id}>"

    @property
    def store(self) -> CrawlStore:
        """The crawl's Redis side; KeyError if the crawl expired or never started."""
        if self._store is None:
            opts = CrawlStore.read_options(self._r, self.id)
            if opts is None:
                raise KeyError(f"no crawl {self.id!r} (expired or never started)")
            self._store = CrawlStore(self._r, opts)
        return self._store

    @property
    def options(self) -> CrawlOptions:
        return self.store.opts

    @property
    def state(self) -> Ledger:
        return self.store.ledger

    @property
    def output_dir(self) -> Path:
        return Path(self.options.output) / self.id

    # --- watching ----------------------------------------------------------------------------
    def progress(self) -> dict[str, Any]:
        p = self.state.progress()
        opts = self.options
        if opts.max_pages and p["recent_pages_per_s"] > 0:
            left = max(opts.max_pages - p["done"], 0)
            p["eta_s"] = round(min(left, p["outstanding"]) / p["recent_pages_per_s"], 1)
        p["backlog"] = self.store.frontier.backlog(5)
        # Workers wait (and cannot record why) while Redis is full: ask Redis itself.
        p["redis_oom"] = refuses_writes(self.client)
        return p

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def status(self) -> str:
        raw = self.client.hget(self.ck.state, "status")
        return raw.decode() if raw else "unknown"

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> dict[str, Any]:
        """Block until the crawl is finished (its counter reached zero); returns the summary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"crawl {self.id} not finished after {timeout}s")
            time.sleep(poll)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """The crawl's ``summary.json`` once the finishing worker has written it (the status
        flips just before), else the same figures computed from Redis now."""
        path = self.output_dir / "summary.json"
        finished_at = float(self.state.flags().get("finished_at", 0) or 0)
        for _ in range(40 if finished_at else 0):
            if path.exists():
                data = dict(json.loads(path.read_text("utf-8")))
                # After retry_failed() the file of the first finish is still there.
                if finished_at and (data.get("finished_at") or 0) >= finished_at - 1e-3:
                    return data
            time.sleep(0.05)
        return self.state.summary()

    def pages(self) -> Iterator[dict[str, Any]]:
        return read_pages(self.output_dir)

    def bloom(self) -> dict[str, float]:
        return self.store.bloom.stats()

    def domains(self, top: int = 20) -> list[dict[str, Any]]:
        names = [d for d, _ in self.store.frontier.backlog(top)]
        infos = self.store.politeness.domains(names)
        for info in infos:
            info["rate"] = effective_rate(info, self.options.rate)
        return infos

    def events(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Live events of this crawl until ``crawl_finished`` (or ``timeout`` s of silence)."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.ck.events)
        try:
            while True:
                msg = pubsub.get_message(timeout=timeout if timeout is not None else 1.0)
                if msg is None:
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
    def pause(self) -> None:
        self.client.hset(self.ck.state, mapping={"paused": "1", "status": "paused"})

    def resume(self) -> None:
        self.client.hset(self.ck.state, mapping={"paused": "0", "status": "running"})

    def cancel(self) -> None:
        """Drop pending work unfetched; the crawl finishes as ``cancelled``."""
        self.client.hset(self.ck.state, mapping={"cancelled": "1", "paused": "0"})
        self.client.sadd(self.keys.running, self.id)

    def failed(self) -> list[dict[str, Any]]:
        return [json.loads(v) for v in self.client.hvals(self.ck.failed)]

    def retry_failed(self) -> int:
        """Put every dead-lettered URL back into the frontier; returns how many."""
        records = self.failed()
        if not records:
            return 0
        self.client.hset(self.ck.state, mapping={"status": "running"})
        self.client.hdel(self.ck.state, "finished_at")
        self.client.sadd(self.keys.running, self.id)
        # The replayed URLs will be counted again when they reach their new final state.
        pipe = self.client.pipeline()
        for r in records:
            pipe.hincrby(self.ck.stats, f"failed:{r['error']}", -1)
        pipe.hincrby(self.ck.stats, "failed", -len(records))
        pipe.hincrby(self.ck.stats, "done", -len(records))
        pipe.hdel(self.ck.failed, *[r["url"] for r in records])
        pipe.execute()
        admitted = self.store.frontier.admit(
            ((r["url"], int(r["depth"])) for r in records), force=True
        )
        return admitted.admitted


def list_crawls(client: redis.Redis, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    ids = [i.decode() for i in client.zrevrange(keys.crawls, 0, limit - 1)]
    out = []
    for crawl_id in ids:
        state = {
            k.decode(): v.decode() for k, v in client.hgetall(keys.crawl(crawl_id).state).items()
        }
        if state:
            out.append({"crawl_id": crawl_id, **state})
    return out
