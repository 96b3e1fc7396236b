"""Worker heartbeats: every worker process writes its id and the time into one hash every
``HEARTBEAT_EVERY`` seconds (a thread of its context). A URL whose fetch or parse began in a
process that has not beaten for ``worker_dead_seconds`` is taken back by the dispatcher
(reclaim.lua) instead of waiting for the broker's visibility timeout: a SIGKILLed, frozen or
partitioned worker costs its URLs seconds, not ten minutes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time

import redis

from .keys import Keys

log = logging.getLogger(__name__)

#: Seconds between two heartbeats of a process: a fifth of the default worker_dead_seconds,
#: so that a live process is never taken for dead by one late beat.
HEARTBEAT_EVERY = 2.0
#: Seconds after which a silent worker's entry is deleted from the hash.
FORGET_AFTER = 24 * 3600


class Heartbeat:
    """This process's heartbeat thread (started on creation, stopped by :meth:`stop`)."""

    def __init__(self, client: redis.Redis, keys: Keys, worker: str) -> None:
        self.client, self.key, self.worker = client, keys.workers, worker
        self._stop = threading.Event()
        self.beat()
        self._thread = threading.Thread(target=self._run, name="crawler-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        self.client.hset(self.key, self.worker, repr(time.time()))

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY):
            try:
                self.beat()
            except redis.RedisError as exc:  # Redis away: the next beat will do
                log.debug("heartbeat failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(redis.RedisError):
            self.client.hdel(self.key, self.worker)  # gone on purpose: reclaim at once


def alive(client: redis.Redis, keys: Keys, dead_after: float) -> set[str]:
    """Workers that beat within ``dead_after`` seconds; forgets long-silent ones."""
    now = time.time()
    beats = {w.decode(): float(t) for w, t in client.hgetall(keys.workers).items()}
    gone = [w for w, t in beats.items() if t < now - FORGET_AFTER]
    if gone:
        client.hdel(keys.workers, *gone)
    return {w for w, t in beats.items() if t >= now - dead_after}


def beats(client: redis.Redis, keys: Keys) -> dict[str, float]:
    """Every worker process's last heartbeat (unix seconds), read only (the dashboard)."""
    return {w.decode(): float(t) for w, t in client.hgetall(keys.workers).items()}


# --- host affinity ----------------------------------------------------------------------------
# A fetch process (one OS process: a threads, gevent or solo pool that takes every fetch queue)
# keeps its hosts' connections; a host's released URLs go to one such process, through that
# process's direct queue, while it beats, so its next page finds its connection open.


def join(client: redis.Redis, keys: Keys, worker: str) -> None:
    """``worker`` takes its hosts' URLs from its direct queue from now on."""
    client.sadd(keys.fetchers, worker)


def leave(client: redis.Redis, keys: Keys, worker: str) -> None:
    client.srem(keys.fetchers, worker)


def affine(client: redis.Redis, keys: Keys, dead_after: float) -> tuple[list[str], list[str]]:
    """(live, dead) fetch processes with a direct queue: live ones beat within ``dead_after``
    seconds, sorted. Two round trips; the dispatcher asks once a second."""
    members = sorted(m.decode() for m in client.smembers(keys.fetchers))
    if not members:
        return [], []
    now = time.time()
    beat = client.hmget(keys.workers, members)
    live = [m for m, t in zip(members, beat, strict=True) if t and float(t) >= now - dead_after]
    return live, [m for m in members if m not in live]


def holder(domain: str, live: list[str]) -> str | None:
    """The live fetch process that holds ``domain`` (None: none has a direct queue): the same
    rendezvous hash as release.lua, which marks the URL as that process's."""
    if not live:
        return None
    return max(
        live,
        key=lambda p: hashlib.sha1(f"{p}\t{domain}".encode("utf-8", "surrogateescape")).hexdigest(),
    )
