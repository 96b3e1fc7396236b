"""The crawls one Redis knows, as a registry: whether a crawl exists, the listings (``crawler
list``, the dashboard, the exporter), the running set the dispatchers serve, and forgetting a
crawl with every key of it. Registering one is ``store.start`` (``CrawlStore.create``).
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from ..errors import ConfigError
from . import workers
from .chunk_store import ChunkStore
from .figures import Listed
from .formats import Status
from .options import CrawlOptions
from .store import CrawlStore, RedisHandle


def unregister(r: RedisHandle, opts: CrawlOptions) -> None:
    """Undo a :func:`store.start` cut short by a full Redis (deleting is allowed at maxmemory)."""
    ck = r.keys.crawl(opts.crawl_id)
    pipe = r.client.pipeline(transaction=False)  # a full Redis refuses MULTI
    pipe.delete(ck.config, ck.state)
    pipe.zrem(r.keys.crawls, opts.crawl_id)
    if opts.schedule:
        pipe.zrem(r.keys.schedule_runs(opts.schedule), opts.crawl_id)
    pipe.srem(r.keys.running, opts.crawl_id)
    pipe.execute()


def exists(r: RedisHandle, crawl_id: str) -> bool:
    """The crawl is registered and not expired (its options are there)."""
    return bool(r.client.exists(r.keys.crawl(crawl_id).config))


def recent(r: RedisHandle, limit: int, skipped: list[str] | None = None) -> list[str]:
    """Ids of the ``limit`` newest crawls (expired ones included until their listing goes),
    without those whose options cannot be read: one such crawl must not break the listing,
    the dashboard or the exporter. Their one-line reasons go to ``skipped``."""
    out = []
    for crawl_id in (i.decode() for i in r.client.zrevrange(r.keys.crawls, 0, limit - 1)):
        try:
            CrawlStore.read_options(r, crawl_id)
        except ConfigError as exc:
            if skipped is not None:
                skipped.append(str(exc))
            continue
        out.append(crawl_id)
    return out


def listing(r: RedisHandle, limit: int) -> list[Listed]:
    """``crawler list``: each of the newest crawls' progress, seeds and start; a crawl that
    cannot be read is listed with why (``unreadable``), never a failed listing."""
    out: list[Listed] = []
    skipped: list[str] = []
    for crawl_id in recent(r, limit, skipped):
        try:
            opts = CrawlStore.read_options(r, crawl_id)
            if opts is None:
                continue  # expired
            p = CrawlStore(r, opts).stats.progress()
        except (redis.ConnectionError, redis.TimeoutError):
            raise
        except Exception as exc:  # one bad crawl (a bug) is not all
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            out.append(Listed(crawl_id, unreadable=f"crawl {crawl_id}: {why}"))
            continue
        out.append(Listed(crawl_id, p, tuple(opts.seeds), opts.started_at))
    return out + [Listed("", unreadable=why) for why in skipped]


def running(r: RedisHandle) -> list[str]:
    """Ids of the crawls the dispatchers release work for."""
    return [i.decode() for i in r.client.smembers(r.keys.running)]


def forget(r: RedisHandle, crawl_id: str, force: bool = False, dead_after: float = 10.0) -> int:
    """Delete every key of a crawl (the patterns of keys.py) and its listings; returns how many
    keys went. Refused (ConfigError) for a crawl still running, paused or finishing while a
    worker lives (``dead_after`` s since its heartbeat) to serve it, unless ``force``: its
    workers would write again. A crawl stranded (no worker alive) or unreadable (no worker
    can serve it) is forgotten as it is, which is what this is for."""
    ck = r.keys.crawl(crawl_id)
    raw = r.client.hget(ck.state, "status")
    status = raw.decode() if raw else Status.UNKNOWN.value
    try:
        opts = CrawlStore.read_options(r, crawl_id)
    except ConfigError:
        opts = None
    else:
        live = status in (
            Status.RUNNING.value, Status.PAUSED.value, Status.CANCELLING.value, Status.FINISHING.value
        )  # fmt: skip
        if live and not force and workers.alive(r.client, r.keys, dead_after):
            first = "wait for it" if status == Status.CANCELLING.value else "cancel it first"
            raise ConfigError(
                f"crawl {crawl_id} is {status} and workers serve it: {first}, or "
                "forget it with --force (its workers may still write)"
            )
    gone = 0
    for pattern in ck.patterns:
        batch = list(r.client.scan_iter(match=pattern, count=1000))
        for i in range(0, len(batch), 500):
            gone += int(r.client.unlink(*batch[i : i + 500]) or 0)
    if opts is not None and opts.frontier_store:  # no index refers to its chunks any more
        ChunkStore.of(opts.frontier_store, crawl_id).clear()
    pipe = r.client.pipeline(transaction=False)
    pipe.zrem(r.keys.crawls, crawl_id)
    pipe.srem(r.keys.running, crawl_id)
    if opts is not None and opts.schedule:
        pipe.zrem(r.keys.schedule_runs(opts.schedule), crawl_id)
    pipe.execute()
    return gone


def same_seeds_running(r: RedisHandle, seeds: Iterable[str]) -> list[str]:
    """Running crawls (readable ones) whose seeds are exactly ``seeds``."""
    wanted, out = set(seeds), []
    for crawl_id in running(r):
        try:
            opts = CrawlStore.read_options(r, crawl_id)
        except ConfigError:
            continue
        status = r.client.hget(r.keys.crawl(crawl_id).state, "status") or b""
        final = status.decode() in (Status.FINISHED.value, Status.CANCELLED.value)
        if opts is not None and set(opts.seeds) == wanted and not final:
            out.append(crawl_id)  # (a finished one leaves the running set just after)
    return sorted(out)
