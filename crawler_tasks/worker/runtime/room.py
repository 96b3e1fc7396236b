"""Admission waits for room in Redis (``maxmemory``, policy ``noeviction``).

New URLs are what fills Redis during a crawl (its frontier: ~80 bytes a pending URL,
``bench/memory.py``), so when Redis is nearly full this process stops admitting them, and
only them, in two ways:

* **The gate.** Before a page's links are admitted (:meth:`Room.wait`) and before the
  dispatcher releases fetches (:meth:`Room.full`), Redis's memory is read (INFO, at most
  once a second per process). From ``admission_memory_fraction`` of ``maxmemory`` a page
  waits, holding its task, for up to ``admission_wait`` seconds; then its URL goes back to the
  frontier (``pipeline._hand_back``, no retry spent) to be fetched again once there is room.
  Nothing of that page was admitted yet, so nothing is counted twice, and no new fetch is
  released meanwhile. The last part of memory stays for what the crawl must still write
  (starting, finishing, recording URLs; the broker if it is the same Redis).
* **In place.** A write of the admission that Redis refuses for memory all the same (it
  filled between two looks, or the fraction is 1) is sent again after a pause, for as long
  as it takes (:class:`PatientClient`). A refused command, script or MULTI did nothing:
  Redis refuses before a script's first write and a MULTI as a whole. Sending it again is
  exact, where running the whole task again would fetch the page twice and count its
  duplicate links twice.

One WARNING line when admission pauses in this process, one a minute while it lasts, one when
it resumes; ``crawler status`` shows the same state, read from Redis (``state/health.py``).

Room on the output disk (:func:`probe_output`). A crawl whose files could not be written (a
full disk: ``CrawlLifecycle.output_failed``) releases nothing until there is room again. The
dispatchers find that out every ``OUTPUT_PAUSE`` s with a write of its own (a probe file of
``OUTPUT_PROBE_BYTES``, fsynced, then deleted) in the crawl's directory on its host, never by
fetching a page: a disk full for a minute costs no request but the one whose write failed.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis.exceptions import OutOfMemoryError

from ...errors import AdmissionPaused
from ...state import objects
from ...state.health import Memory, admission_paused, memory
from ...state.status import OUTPUT_PAUSE
from ..output.appends import describe

if TYPE_CHECKING:
    from ...state.store import CrawlStore

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between two reminders while admission stays paused.
REMIND_EVERY = 60.0
#: Seconds between two attempts of a refused write, at most (doubling from 0.1 s).
MAX_DELAY = 2.0
#: Seconds of room after which a pause counts as over in the log.
SETTLED = 5.0
#: Bytes the output probe writes: room for a few pages' records and WARC records, so that
#: the first page released after it finds room for its own.
OUTPUT_PROBE_BYTES = 256 * 1024


class Room:
    """Whether this process may admit new URLs; one per process (``Context.room``)."""

    def __init__(
        self, client: redis.Redis, fraction: float, patience: float, every: float = 1.0
    ) -> None:
        self.client, self.fraction, self.patience, self.every = client, fraction, patience, every
        self._lock = threading.Lock()  # a threads pool shares one
        self._looked = -math.inf  # monotonic time of the last INFO
        self._memory: Memory | None = None
        self._full = False  # as last seen
        self._paused = False  # as last logged
        self._since = self._told = 0.0  # when the pause began, when it was last logged
        self._room_since: float | None = None  # room again since (pause not over in the log)
        self.waiting = 0  # pages waiting for room now
        self.handed_back = 0  # URLs given back to the frontier in this pause

    def full(self) -> bool:
        """True while Redis has no room for new URLs (read at most every ``every`` s)."""
        now = time.monotonic()
        with self._lock:
            if now - self._looked < self.every:
                return self._full
            self._looked = now
        m = memory(self.client)
        with self._lock:
            self._memory = m
            self._note(m is not None and m.over(self.fraction), now)
            return self._full

    def wait(self) -> None:
        """Return once there is room; AdmissionPaused after ``patience`` seconds."""
        if not self.full():
            return
        deadline = time.monotonic() + self.patience
        with self._lock:
            self.waiting += 1
        try:
            while self.full():
                if time.monotonic() >= deadline:
                    with self._lock:
                        self.handed_back += 1
                    raise AdmissionPaused(f"no room in Redis for {self.patience:g}s")
                time.sleep(self.every)
        finally:
            with self._lock:
                self.waiting -= 1

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, sent again while Redis refuses it for memory (see the
        module doc)."""
        delay = 0.1
        while True:
            try:
                return fn(*args, **kwargs)
            except OutOfMemoryError:
                with self._lock:
                    self._looked = -math.inf  # look again next time
                    self.waiting += 1
                    self._note(True, time.monotonic())
                time.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
                with self._lock:
                    self.waiting -= 1

    def _note(self, full: bool, now: float) -> None:
        """Log the changes of state (under the lock). Near the line Redis goes over and under
        it as pages are finished and admitted: a pause ends, in the log, after ``SETTLED``
        seconds of room, so flapping is one pause, not a line per flip."""
        self._full = full
        if full:
            self._room_since = None
            if not self._paused:
                self._paused, self._since, self._told, self.handed_back = True, now, now, 0
                log.warning(
                    "%s: pages wait to admit their links and no fetch is released; it resumes "
                    "by itself when memory is freed, maxmemory is raised or a node is added",
                    self._state(),
                )
            elif now - self._told >= REMIND_EVERY:
                self._told = now
                log.warning(
                    "%s for %.0fs: %d pages waiting, %d URLs handed back to the frontier",
                    self._state(),
                    now - self._since,
                    self.waiting,
                    self.handed_back,
                )
        elif self._paused:
            if self._room_since is None:
                self._room_since = now
            elif now - self._room_since >= SETTLED:
                self._paused = False
                m = self._memory
                where = m.describe() if m is not None else "no maxmemory set"
                took = self._room_since - self._since
                log.warning("admission resumed after %.1fs (Redis: %s)", took, where)

    def _state(self) -> str:
        m = self._memory
        return admission_paused(m) if m is not None else "admission paused: Redis out of memory"

    def client_for(self, client: redis.Redis) -> Any:
        """``client`` whose writes wait in place while Redis refuses them for memory."""
        return PatientClient(client, self)


class PatientClient:
    """A Redis client for admission: every call goes through :meth:`Room.call`; pipelines
    too (a MULTI is sent again whole; of a plain pipeline only the refused commands)."""

    def __init__(self, client: redis.Redis, room: Room) -> None:
        self._client, self._room = client, room

    def pipeline(self, *args: Any, **kwargs: Any) -> _Pipeline:
        return _Pipeline(lambda: self._client.pipeline(*args, **kwargs), self._room)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr
        # Room.call with the client's method bound in: plain data, no closure of ours. Built
        # once per name: a closure and functools.wraps on every call was the wrapper's cost
        # on the hot path (issue 32); __getattr__ is not asked again for a set name.
        patiently = functools.partial(self._room.call, attr)
        setattr(self, name, patiently)
        return patiently


class _Pipeline:
    """Records the calls made on a pipeline; :meth:`execute` replays them on a new pipeline of
    the real client (standalone or cluster, as it was asked for) and sends again, after a
    pause, the commands Redis refused for memory: of a plain pipeline only those (the others
    ran), of a MULTI all of them (refused as a whole, it raises and nothing ran)."""

    def __init__(self, new: Callable[[], Any], room: Room) -> None:
        self._new, self._room = new, room
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def queue(*args: Any, **kwargs: Any) -> _Pipeline:
            self._calls.append((name, args, kwargs))
            return self

        return queue

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        calls, self._calls = self._calls, []
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))

        def send() -> None:
            nonlocal todo
            pipe = self._new()
            for i in todo:
                name, args, kwargs = calls[i]
                getattr(pipe, name)(*args, **kwargs)
            out = pipe.execute(raise_on_error=False)
            if len(out) != len(todo):
                raise RuntimeError("a pipeline call queued several commands")
            for i, r in zip(todo, out, strict=True):
                results[i] = r
            todo = [i for i in todo if isinstance(results[i], OutOfMemoryError)]
            if todo:
                raise results[todo[0]]

        self._room.call(send)
        errors = [r for r in results if isinstance(r, Exception)]
        if errors and raise_on_error:
            raise errors[0]
        return results


def probe_output(store: CrawlStore, output_dir: str) -> None:
    """While ``store``'s output cannot be written and its next probe is due: a probe write in
    its directory here; room found ends the pause (releases go on), none sets the next probe
    ``OUTPUT_PAUSE`` s later. ``output_dir``: this process's ``CRAWLER_OUTPUT_DIR``. Called
    by each dispatcher's repair round (every 2 s)."""
    state = store.lifecycle.read()
    if state.output_problem is None or state.output_blocked_until > time.time():
        return
    directory = Path(objects.local_root(store.opts.output, output_dir)) / store.opts.crawl_id
    why = no_room(directory)
    if why is None:
        log.warning("crawl %s: its output can be written again (%s)", store.id, directory)
        store.lifecycle.output_ok()
    else:
        store.lifecycle.output_failed(f"{why} at {directory}", OUTPUT_PAUSE)


def no_room(directory: Path, size: int = OUTPUT_PROBE_BYTES) -> str | None:
    """Why ``size`` bytes cannot be written in ``directory`` now (None: they can), found by
    writing them (fsynced: a full disk may refuse only the flush) and deleting them."""
    probe = directory / f".room-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"\0" * size)
            f.flush()
            os.fsync(f.fileno())
        return None
    except OSError as exc:
        return describe(exc)
    finally:
        probe.unlink(missing_ok=True)
