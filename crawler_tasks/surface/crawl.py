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
from urllib.parse import urlsplit

import redis

from ..errors import ConfigError, RedisFull, UnknownCrawl
from ..settings import Settings, load, redact
from ..state import connection
from ..state import store as stores
from ..state.health import memory, refuses_writes
from ..state.keys import CrawlKeys, Keys
from ..state.ledger import RATE_WINDOW, Ledger
from ..state.options import CrawlOptions
from ..state.politeness import effective_rate
from ..state.store import CrawlStore, RedisHandle, check_seeds, new_crawl_id
from ..worker.output import read_pages

__all__ = ["Crawl", "start_crawl", "list_crawls", "check_seeds", "new_crawl_id"]

FINAL_STATUSES = ("finished", "cancelled")


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
    client = client or connection.connect(settings.state_url)
    connection.check_broker(settings.broker_url, client)
    r = RedisHandle.connect(client, settings.key_prefix)
    if rates:
        options["rates"] = rates
    # Without an explicit output, each worker writes under its own CRAWLER_OUTPUT_DIR.
    output_dir = str(Path(output).resolve()) if output else ""
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


def connect_settings(broker: str | None) -> Settings:
    """Settings from the environment, with ``broker`` (checked) as broker and state URL."""
    if broker is None:
        return load()
    check_redis_url(broker)
    return load(broker_url=broker, redis_url="")


def check_redis_url(url: str) -> None:
    """ConfigError for a URL redis-py could not connect with, naming it (password masked)."""
    parts = urlsplit(url)
    why = ""
    if parts.scheme not in ("redis", "rediss", "unix"):
        why = "scheme must be redis://, rediss:// or unix://"
    elif parts.scheme != "unix" and not parts.hostname:
        why = "no host"
    else:
        try:
            parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
        except ValueError:
            why = "the port is not a number"
    if why:
        raise ConfigError(f"malformed Redis URL {redact(url)!r}: {why}")


def _no_room(client: redis.Redis, need: int) -> bool:
    """True if Redis refuses writes, or would once the crawl's dedupe filter (``need`` bytes,
    allocated by its first admit) is in: a Lua script that starts under ``maxmemory`` may end
    far above it, so check before."""
    if refuses_writes(client):
        return True
    for node in connection.node_clients(client):  # the crawl's slot may be on any master
        try:
            info = node.info("memory")
        except redis.ResponseError:  # INFO forbidden (managed Redis): let the writes tell
            return False
        limit = int(info.get("maxmemory", 0) or 0)
        if limit and int(info.get("used_memory", 0)) + need > limit:
            return True
    return False


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
    pipe.delete(ck.config, ck.state)
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
    def state(self) -> Ledger:
        return self.store.ledger

    @property
    def output_dir(self) -> Path:
        """Where this crawl's files are: its ``output`` if it set one, else this host's
        ``CRAWLER_OUTPUT_DIR`` (each worker writes under its own; see the README)."""
        return Path(self.options.output or self.settings.output_dir).resolve() / self.id

    # --- watching ----------------------------------------------------------------------------
    def progress(self) -> dict[str, Any]:
        opts = self.options
        p = self.state.progress()
        # Pages/s of the last RATE_WINDOW s: a young crawl has not lived that long yet.
        if 0 < p["elapsed_s"] < RATE_WINDOW and p["status"] not in FINAL_STATUSES:
            p["recent_pages_per_s"] *= RATE_WINDOW / max(p["elapsed_s"], 1.0)
        # Pages/s counts pages that reached a final state, not URLs dropped by a cancel.
        if p["cancelled"] and p["elapsed_s"]:
            p["pages_per_s"] = round(max(p["done"] - p["cancelled"], 0) / p["elapsed_s"], 2)
        if opts.max_pages and p["recent_pages_per_s"] > 0 and not p["paused"]:
            left = max(opts.max_pages - p["done"], 0)
            p["eta_s"] = round(min(left, p["outstanding"]) / p["recent_pages_per_s"], 1)
        p["backlog"] = self.store.frontier.backlog(5)
        p["summary_path"] = self.state.flags().get("summary_path")
        # Workers wait (and cannot record why) while Redis is full: ask Redis itself.
        mem = memory(self.client)
        p["redis_oom"] = mem is not None and mem.refuses_writes()
        fraction = self.settings.admission_memory_fraction
        p["admission_paused"] = mem is not None and mem.over(fraction)
        p["redis_memory"] = mem.as_dict() if mem is not None else None
        return p

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def status(self) -> str:
        raw = self.client.hget(self.ck.state, "status")
        return raw.decode() if raw else "unknown"

    def exists(self) -> bool:
        return bool(self.client.exists(self.ck.config))

    def wait(self, timeout: float | None = None, poll: float = 0.25) -> dict[str, Any]:
        """Block until the crawl is finished (its counter reached zero); returns the summary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished:
            if deadline is not None and time.monotonic() > deadline:
                p = self.state.progress()
                left = {k: p[k] for k in ("status", "done", "queued", "in_flight", "retrying")}
                raise TimeoutError(f"crawl {self.id} not finished after {timeout}s: {left}")
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
                    return _without_zeros(data)
            time.sleep(0.05)
        return _without_zeros(self.state.summary())

    def pages(self, latest: bool = True) -> Iterator[dict[str, Any]]:
        """Records of this crawl's ``pages-*.jsonl`` (on this host). The files are append-only
        logs: a URL replayed by :meth:`retry_failed` has a record for each final state it
        reached; with ``latest`` (default) only its last one is yielded (by ``fetched_at``,
        then file order)."""
        if not latest:
            return read_pages(self.output_dir)
        last: dict[str, dict[str, Any]] = {}
        for record in read_pages(self.output_dir):
            old = last.get(record["url"])
            if old is None or (record.get("fetched_at") or 0) >= (old.get("fetched_at") or 0):
                last[record["url"]] = record
        return iter(last.values())

    def items(self, latest: bool = True) -> Iterator[dict[str, Any]]:
        """Lines of this crawl's ``items-*.jsonl`` (on this host): ``{"url", "item", "rid"}``.
        With ``latest`` (default), only the items of each URL's last record (a page replayed
        by :meth:`retry_failed` has the items of each of its records)."""
        lines = read_pages(self.output_dir, kind="items")
        if not latest:
            return lines
        rids = {r.get("rid") for r in self.pages()}
        return (line for line in lines if line.get("rid") in rids)

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
        # No existence check: listening to a crawl id before start_crawl(crawl_id=...) is fine.
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.ck.events)
        try:
            while True:
                # Subscribed first, then checked: a crawl_finished published in between is
                # not lost, and a crawl finished long ago (its event gone) ends at once.
                msg = pubsub.get_message(timeout=timeout if timeout is not None else 1.0)
                if msg is None:
                    if timeout is not None or self.finished:
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
        return self._steer({"paused": "1", "status": "paused"})

    def resume(self) -> bool:
        return self._steer({"paused": "0", "status": "running"})

    def cancel(self) -> bool:
        """Drop pending work unfetched; the crawl finishes as ``cancelled``. False if it was
        finished already."""
        if not self._steer({"cancelled": "1", "paused": "0"}, wake=True):
            return False
        self.state.copy_cancelled()
        return True

    def _steer(self, mapping: dict[str, str], wake: bool = False) -> bool:
        """Apply ``mapping`` to the crawl's state unless it is finished, atomically (WATCH):
        a crawl finishing meanwhile is never revived as paused or running."""
        self.options  # noqa: B018  (UnknownCrawl: nothing is written for an unknown id)

        def apply(pipe: redis.client.Pipeline) -> bool:
            status = pipe.hget(self.ck.state, "status")
            # "finishing": emptied, its finisher at work (recorder.py); it can only finish.
            if status is None or status.decode() in (*FINAL_STATUSES, "finishing"):
                return False
            pipe.multi()
            pipe.hset(self.ck.state, mapping=mapping)
            return True

        steered = bool(self.client.transaction(apply, self.ck.state, value_from_callable=True))
        # After the transaction: the listing is outside the crawl's hash slot (Redis Cluster).
        if steered and wake:
            self.client.sadd(self.keys.running, self.id)
        return steered

    def failed(self) -> list[dict[str, Any]]:
        self.options  # noqa: B018  (UnknownCrawl)
        return self.state.dead_letters()

    def retry_failed(self) -> int:
        """Put every dead-lettered URL back into the frontier; returns how many."""
        records = self.failed()
        if not records:
            return 0
        # The replayed URLs will be counted again when they reach their new final state.
        ck = self.ck
        pipe = self.client.pipeline(transaction=False)
        for r in records:  # each record's counters are in its URL's partition
            pk = ck.for_url(r["url"])
            if r.get("error"):
                pipe.hincrby(pk.stats, f"failed:{r['error']}", -1)
                pipe.hincrby(pk.stats, "failed", -1)
            else:  # recorded, but its extraction (or on_item task) failed
                pipe.hincrby(pk.stats, "extract_errors", -1)
            pipe.hincrby(pk.stats, "done", -1)
            pipe.hdel(pk.failed, r["url"])
        pipe.execute()
        admitted = self.store.frontier.admit(
            ((r["url"], int(r["depth"])) for r in records), force=True
        )
        # Running again only once the replays are counted: a crawl that looked drained in
        # between would be marked finishing (Ledger.settle).
        self.client.hset(self.ck.state, mapping={"status": "running"})
        self.client.hdel(self.ck.state, "finished_at")
        self.client.sadd(self.keys.running, self.id)
        return admitted.admitted


def _without_zeros(summary: dict[str, Any]) -> dict[str, Any]:
    """retry_failed() takes replayed URLs off their failure counters: drop the zeros left."""
    for name in ("failures", "skipped", "changes", "status_codes"):
        if isinstance(summary.get(name), dict):
            summary[name] = {k: v for k, v in summary[name].items() if v}
    return summary


def list_crawls(client: redis.Redis, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    """The newest crawls: id, status, seeds, started_at and their progress counters."""
    ids = [i.decode() for i in client.zrevrange(keys.crawls, 0, limit - 1)]
    r = RedisHandle.connect(client, keys.prefix)
    out = []
    for crawl_id in ids:
        opts = CrawlStore.read_options(r, crawl_id)
        if opts is None:
            continue  # expired
        p = CrawlStore(r, opts).ledger.progress()
        if p["cancelled"] and p["elapsed_s"]:
            p["pages_per_s"] = round(max(p["done"] - p["cancelled"], 0) / p["elapsed_s"], 2)
        out.append({**p, "seeds": list(opts.seeds), "started_at": opts.started_at})
    return out
