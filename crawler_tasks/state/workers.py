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
from collections.abc import Callable, Iterable
from typing import NamedTuple

import redis

from .keys import Keys
from .scripts import source

log = logging.getLogger(__name__)

#: Seconds between two heartbeats of a process: a fifth of the default worker_dead_seconds,
#: so that a live process is never taken for dead by one late beat.
HEARTBEAT_EVERY = 2.0
#: Seconds after which a silent worker's entry is deleted from the hash.
FORGET_AFTER = 24 * 3600
#: Seconds a process's held set outlives its last change (it is read only while the process
#: beats; this only clears what a killed process left).
HELD_TTL = 3600


class Heartbeat:
    """This process's heartbeat thread (started on creation, stopped by :meth:`stop`).

    ``client`` should be a client of its own (a connection pool of one): a beat must never
    wait for a pooled connection behind the process's own fetch threads, or a process that
    is only busy looks dead and its URLs are taken back from it. The time written is Redis's
    (beat.lua). With ``held``, each beat also writes which fetch URLs the process has received
    and not begun (``keys.held``): the reclaim then does not take a message that a slow but
    living process holds for one lost with a dead worker (see :func:`held_by`)."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        worker: str,
        held: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.client, self.key, self.worker = client, keys.workers, worker
        self._held, self._held_key = held, keys.held(worker)
        self._written: set[str] = set()
        self._script = client.register_script(source("beat"))
        self._stop = threading.Event()
        self.beat()
        self._thread = threading.Thread(target=self._run, name="crawler-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        # The held set first: a reader that sees this beat's time sees what the process
        # held a moment before it (worker/dispatch/lost.py counts on it). A held set Redis
        # refuses does not keep the process from beating: it is said after the beat.
        refused: redis.RedisError | None = None
        if self._held is not None:
            try:
                self._write_held(set(self._held()))
            except redis.RedisError as exc:
                refused = exc
        self._script(keys=[self.key], args=[self.worker], client=self.client)
        if refused is not None:
            raise refused

    def _write_held(self, now: set[str]) -> None:
        """The difference since the last beat, so that no reader sees the set empty."""
        gone, new = self._written - now, now - self._written
        if not (gone or new):
            return
        pipe = self.client.pipeline(transaction=False)
        if new:
            pipe.sadd(self._held_key, *new)
        if gone:
            pipe.srem(self._held_key, *gone)
        pipe.expire(self._held_key, HELD_TTL)
        pipe.execute()
        self._written = now

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(HEARTBEAT_EVERY):
            try:
                self.beat()
            except redis.RedisError as exc:  # Redis away: the next beat will do
                # Said once per outage: past worker_dead_seconds this process's URLs go to
                # others, and its log should say why.
                (log.debug if failing else log.warning)("heartbeat failed: %r", exc)
                failing = True
                continue
            except Exception:  # a beat must never end the thread (a process taken for dead)
                log.exception("heartbeat failed")
                continue
            if failing:
                log.warning("heartbeat written again")
                failing = False

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(redis.RedisError):
            self.client.hdel(self.key, self.worker)  # gone on purpose: reclaim at once
            self.client.delete(self._held_key)


def redis_now(client: redis.Redis) -> float:
    """Redis's clock (seconds), the one heartbeats are written with."""
    sec, usec = client.time()
    return float(sec) + usec / 1e6


def alive(client: redis.Redis, keys: Keys, dead_after: float) -> set[str]:
    """Workers that beat within ``dead_after`` seconds of Redis's clock; forgets long-silent
    ones."""
    now = redis_now(client)
    beats = {w.decode(): float(t) for w, t in client.hgetall(keys.workers).items()}
    gone = [w for w, t in beats.items() if t < now - FORGET_AFTER]
    if gone:
        client.hdel(keys.workers, *gone)
    return {w for w, t in beats.items() if t >= now - dead_after}


def forget_dead(client: redis.Redis, keys: Keys, dead_after: float) -> list[str]:
    """Delete the heartbeats of processes silent for ``dead_after`` seconds (forget.lua): the
    rest of a dead process (its URLs, queue, ``fetchers`` entry, held set) is cleaned when it
    is found dead, and its field would otherwise stay in ``keys.workers`` for a day
    (FORGET_AFTER). A process woken after that writes its field again with its next beat.
    Returns the ids forgotten."""
    script = client.register_script(source("forget"))
    gone = script(keys=[keys.workers], args=[repr(float(dead_after))], client=client)
    return [w.decode() if isinstance(w, bytes) else str(w) for w in gone or ()]


def held_by(client: redis.Redis, keys: Keys, living: Iterable[str], members: list[str]) -> set[str]:
    """Which of ``members`` ("crawl<TAB>url") a living process says it holds (received, not
    begun): their messages are not lost, only waiting in a busy process."""
    living = sorted(living)
    if not members or not living:
        return set()
    pipe = client.pipeline(transaction=False)
    for worker in living:
        pipe.smismember(keys.held(worker), members)
    found: set[str] = set()
    for flags in pipe.execute():
        found.update(m for m, f in zip(members, flags, strict=True) if f)
    return found


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


def depart(client: redis.Redis, keys: Keys, worker: str) -> None:
    """``worker`` begins a warm shutdown: no dispatcher routes it new hosts' URLs from its next
    refresh on, and none deletes its queue while it beats (it hands its queue back itself, see
    worker/dispatch/departure.py); if it dies first, it is dead like any other."""
    client.sadd(keys.leaving, worker)


def leave(client: redis.Redis, keys: Keys, worker: str) -> None:
    """``worker`` (dead, or gone) holds no hosts, and what it held is forgotten."""
    pipe = client.pipeline(transaction=False)
    pipe.srem(keys.fetchers, worker)
    pipe.srem(keys.leaving, worker)
    pipe.delete(keys.held(worker))
    pipe.execute()


class Affinity(NamedTuple):
    """The fetch processes with a direct queue, sorted: ``live`` beat within the dead threshold
    and take new hosts; ``leaving`` beat too but are in a warm shutdown (:func:`depart`);
    ``dead`` stopped beating."""

    live: list[str]
    leaving: list[str]
    dead: list[str]


def affine(client: redis.Redis, keys: Keys, dead_after: float) -> Affinity:
    """Who of ``keys.fetchers`` is live, leaving or dead (on Redis's clock). Three round
    trips; the dispatcher asks once a second."""
    # No TIME in the pipeline: a Redis Cluster's pipelines refuse it (every cluster test's
    # dispatcher failed each tick); redis_now asks a node of the cluster alone.
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.fetchers)
    pipe.smembers(keys.leaving)
    found, gone = pipe.execute()
    members = sorted(m.decode() for m in found)
    if not members:
        return Affinity([], [], [])
    now, leaving = redis_now(client), {m.decode() for m in gone}
    beat = client.hmget(keys.workers, members)
    fresh = [m for m, t in zip(members, beat, strict=True) if t and float(t) >= now - dead_after]
    return Affinity(
        [m for m in fresh if m not in leaving],
        [m for m in fresh if m in leaving],
        [m for m in members if m not in fresh],
    )


def holder(domain: str, live: list[str]) -> str | None:
    """The live fetch process that holds ``domain`` (None: none has a direct queue): the same
    rendezvous hash as release.lua, which marks the URL as that process's."""
    if not live:
        return None
    return max(
        live,
        key=lambda p: hashlib.sha1(f"{p}\t{domain}".encode("utf-8", "surrogateescape")).hexdigest(),
    )
