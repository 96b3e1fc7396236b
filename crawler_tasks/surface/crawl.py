"""Starting and steering crawls from Python::

    >>> from crawler_tasks import start_crawl
    >>> crawl = start_crawl(["https://example.org/"], max_depth=3, max_pages=5000)
    >>> crawl.progress()
    >>> crawl.wait()

``start_crawl`` only writes the crawl's options and seeds to Redis; workers started with
``celery -A crawler_tasks worker`` on any host do the rest.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis

from ..errors import InvalidSeed, InvalidURL, RedisFull
from ..settings import Settings, load
from ..state.bloom import BloomFilter
from ..state.frontier import Frontier
from ..state.health import refuses_writes
from ..state.keys import Keys
from ..state.ledger import CrawlState
from ..state.options import CrawlOptions
from ..state.politeness import Politeness, effective_rate
from ..state.scripts import Scripts
from ..web.netguard import is_public_address
from ..web.urls import host_of, normalize
from ..worker.output import read_pages

FINAL_STATUSES = ("finished", "cancelled")


def new_crawl_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def check_seeds(seeds: Iterable[str], allow_private: bool) -> list[str]:
    """Normalised seeds, or InvalidSeed naming the first one that cannot be crawled."""
    out = []
    for seed in seeds:
        try:
            url = normalize(seed)
        except InvalidURL as exc:
            raise InvalidSeed(seed, str(exc)) from None
        host = host_of(url).strip("[]")
        if not allow_private and (host == "localhost" or _is_private_literal(host)):
            raise InvalidSeed(
                seed,
                "private or loopback address: allow it with --allow-private-networks "
                "(allow_private_networks=True)",
            )
        out.append(url)
    if not out:
        raise InvalidSeed("", "no seed URL given")
    return list(dict.fromkeys(out))


def _is_private_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: checked when it is resolved, on every connection
    return not is_public_address(host)


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
    allow_private = bool(options.get("allow_private_networks", False))
    urls = check_seeds(list(seeds), allow_private)
    values = {**CrawlOptions.defaults(settings), **options}
    for key in ("allowed_domains", "include", "exclude"):
        values[key] = tuple(values.get(key) or ())
    opts = CrawlOptions(
        crawl_id=crawl_id or new_crawl_id(),
        seeds=tuple(urls),
        rates={h.lower(): float(r) for h, r in (rates or {}).items()},
        output=str(Path(output or settings.output_dir).resolve()),
        started_at=time.time(),
        **values,
    )
    keys = Keys(settings.key_prefix)
    crawl = Crawl(opts.crawl_id, settings=settings, client=client)
    if _no_room(client, opts):
        raise RedisFull(_full_message(client, opts))
    try:
        _register(client, keys, opts)
        crawl.frontier().admit((u, 0) for u in urls)
    except redis.exceptions.OutOfMemoryError:
        _unregister(client, keys, opts)  # deleting is allowed at maxmemory
        raise RedisFull(_full_message(client, opts)) from None
    return crawl


def _no_room(client: redis.Redis, opts: CrawlOptions) -> bool:
    """True if the filter allocated at the first admit would take Redis past ``maxmemory``
    (a Lua script that starts under the limit may end far above it: check before)."""
    if refuses_writes(client):
        return True
    try:
        info = client.info("memory")
    except redis.ResponseError:  # INFO forbidden (managed Redis): let the writes tell
        return False
    limit = int(info.get("maxmemory", 0) or 0)
    return bool(limit) and int(info.get("used_memory", 0)) + opts.bloom.bits // 8 > limit


def _full_message(client: redis.Redis, opts: CrawlOptions) -> str:
    info = client.info("memory")
    mb = 1024 * 1024
    need = opts.bloom.bits / 8 / mb
    why = f"its dedupe filter takes {need:.1f} MB up front" + (
        "" if opts.max_pages else f" (no max_pages: sized for {opts.bloom.capacity:,} URLs)"
    )
    return (
        f"Redis cannot hold this crawl: {info.get('used_memory', 0) / mb:.1f} MB used of "
        f"maxmemory {int(info.get('maxmemory', 0)) / mb:.1f} MB, and {why}. Raise maxmemory, "
        "free memory" + ("" if opts.max_pages else ", or set max_pages (or CRAWLER_BLOOM_CAPACITY)")
    )


def _unregister(client: redis.Redis, keys: Keys, opts: CrawlOptions) -> None:
    ck = keys.crawl(opts.crawl_id)
    pipe = client.pipeline(transaction=False)  # a full Redis refuses MULTI
    pipe.delete(ck.config, ck.state, ck.rates)
    pipe.zrem(keys.crawls, opts.crawl_id)
    if opts.schedule:
        pipe.zrem(keys.schedule_runs(opts.schedule), opts.crawl_id)
    pipe.srem(keys.running, opts.crawl_id)
    pipe.execute()


def _register(client: redis.Redis, keys: Keys, opts: CrawlOptions) -> None:
    ck = keys.crawl(opts.crawl_id)
    if not client.set(ck.config, opts.to_json(), nx=True):
        raise ValueError(f"crawl {opts.crawl_id!r} exists already")
    pipe = client.pipeline()
    pipe.hset(ck.state, mapping={"status": "running", "started_at": repr(opts.started_at)})
    if opts.rates:
        pipe.hset(
            ck.rates, mapping={h: "inf" if math.isinf(r) else r for h, r in opts.rates.items()}
        )
    pipe.zadd(keys.crawls, {opts.crawl_id: opts.started_at})
    if opts.schedule:
        pipe.zadd(keys.schedule_runs(opts.schedule), {opts.crawl_id: opts.started_at})
    pipe.sadd(keys.running, opts.crawl_id)
    pipe.execute()


class Crawl:
    """A handle on one crawl; cheap to create, holds no state but its id and clients."""

    def __init__(
        self, crawl_id: str, *, settings: Settings | None = None, client: redis.Redis | None = None
    ) -> None:
        self.id = crawl_id
        self.settings = settings or load()
        self.client = client or redis.Redis.from_url(self.settings.state_url)
        self.keys = Keys(self.settings.key_prefix)
        self.ck = self.keys.crawl(crawl_id)
        self._scripts = Scripts(self.client)
        self._opts: CrawlOptions | None = None

    def __repr__(self) -> str:
        return f"<Crawl {self.id}>"

    @property
    def options(self) -> CrawlOptions:
        if self._opts is None:
            raw = self.client.get(self.ck.config)
            if raw is None:
                raise KeyError(f"no crawl {self.id!r} (expired or never started)")
            self._opts = CrawlOptions.from_json(raw)
        return self._opts

    @property
    def state(self) -> CrawlState:
        return CrawlState(self.client, self.keys, self.id, self._scripts)

    def frontier(self) -> Frontier:
        return Frontier(self.client, self.keys, self.options, self._scripts, self.settings)

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
        p["backlog"] = self.frontier().backlog(5)
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
        return BloomFilter(self.client, self.ck, self.options.bloom, self._scripts).stats()

    def domains(self, top: int = 20) -> list[dict[str, Any]]:
        names = [d for d, _ in self.frontier().backlog(top)]
        polite = Politeness(self.client, self.keys, self.ck, self._scripts, self.settings)
        infos = polite.domains(names)
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
        admitted = self.frontier().admit(((r["url"], int(r["depth"])) for r in records), force=True)
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
