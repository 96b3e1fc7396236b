"""A crawl's status and steering (its state hash): paused, resumed, cancelled, finishing,
finished; whether it is drained; the finisher's lock and the end of the crawl.

Every write of a crawl's status goes through :class:`CrawlLifecycle`, with the values of
:class:`~crawler_tasks.state.formats.Status`, except finishing.lua's (run by
:meth:`CrawlLifecycle.finishing`, its literals pinned by ``tests/integration/test_formats.py``) and the
final one, written by the crawl's finisher (:meth:`Finisher.finished
<crawler_tasks.state.finisher.Finisher.finished>`).
"""

from __future__ import annotations

import time
from typing import Any

import redis

from .crawl_state import CrawlState, Note
from .formats import Status, Steering
from .keys import CrawlKeys, Keys
from .scripts import Scripts

#: Seconds between two probes of a crawl's output that could not be written (worker/runtime/room.py).
OUTPUT_PAUSE = 10.0


class CrawlLifecycle:
    """A crawl's life through its state hash: its status (formats.Status), the steering of
    its owner, its output's faults, completion and the notes workers leave (its end is the
    finisher's: state/finisher.py). (Named so, not "CrawlStatus": the word
    status means the Status value alone; a store's instance is ``store.lifecycle``.)"""

    def __init__(
        self, client: redis.Redis, keys: Keys, ck: CrawlKeys, crawl_id: str, scripts: Scripts
    ) -> None:
        self.client = client
        self.keys = keys  # the listing of running crawls
        self.ck = ck
        self.crawl_id = crawl_id
        self.scripts = scripts

    # --- reading ---------------------------------------------------------------------------
    def read(self) -> CrawlState:
        """The whole state hash, typed: status, times, flags and notes."""
        return CrawlState.from_hash(self.client.hgetall(self.ck.state))

    def status(self) -> Status:
        raw = self.client.hget(self.ck.state, "status")
        return Status(raw.decode()) if raw else Status.UNKNOWN

    #: The fields of the state hash :meth:`steering` reads (HMGET), and their order.
    STEERING_FIELDS = ("paused", "cancelled", "status", "output_blocked_until")

    def steering(self) -> Steering:
        """What release.lua is told (or FINISHING: nothing to release, finish it). While the
        crawl's output cannot be written (:meth:`output_failed`), nothing is released: a
        fetched page could not be kept."""
        return steering_of(self.client.hmget(self.ck.state, *self.STEERING_FIELDS))

    def steering_read(self) -> tuple[str, tuple[str, ...]]:
        """The HMGET of :meth:`steering`, to ask in another round trip (the dispatcher's
        survey); its reply goes to :func:`steering_of`."""
        return self.ck.state, self.STEERING_FIELDS

    # --- output faults (a full or failing disk: worker/output/files.py) ----------------------------
    def output_failed(self, why: str, pause: float = OUTPUT_PAUSE) -> None:
        """Writing the crawl's files failed (``why``: "disk full at DIR"): releases pause
        until a write of the crawl's own finds room (:meth:`output_ok`): a probe of the output
        every ``pause`` s (``output_blocked_until``: the next one, worker/runtime/room.py), never a
        page fetched to find out; the records wait in Redis meanwhile. Shown by progress()
        as ``output``."""
        now = time.time()
        self.client.hset(
            self.ck.state,
            mapping={"output_problem": why, "output_blocked_until": repr(now + pause)},
        )

    def output_ok(self) -> None:
        """A write succeeded again after :meth:`output_failed`."""
        self.client.hdel(self.ck.state, "output_problem", "output_blocked_until")

    def output_problem(self, state: CrawlState | None = None) -> str | None:
        """What keeps the crawl's output from being written, if anything did lately."""
        state = self.read() if state is None else state
        recent = state.output_blocked_until + OUTPUT_PAUSE * 3 > time.time()
        return state.output_problem if recent else None

    # --- steering (the crawl's owner) --------------------------------------------------------
    def pause(self) -> bool:
        """Stop releasing the crawl's URLs (in-flight ones finish): nothing is released once
        this returns (release.lua reads each partition's copy of the flag). False if it is
        finished."""
        if not self._steer({"paused": "1", "status": Status.PAUSED.value}):
            return False
        self._flag_partitions("paused", "1")
        return True

    def resume(self) -> bool:
        self._flag_partitions("paused", "0")
        return self._steer({"paused": "0", "status": Status.RUNNING.value})

    def _flag_partitions(self, name: str, value: str) -> None:
        """Copy a flag of the crawl into every partition's flow hash, for the Lua scripts
        there (each touches only its partition's hash slot on a Redis Cluster)."""
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hset(pk.flow, name, value)
        pipe.execute()

    def cancel(self) -> bool:
        """Drop pending work unfetched; the crawl is ``cancelling`` until every URL is final
        (the dispatchers count its frontier cancelled in bulk, cancel.lua; its URLs in flight
        end as they start), then finishes as cancelled. A state change, not work per URL: it
        returns at once whatever the backlog. False if it was finished already; True again
        while it is cancelling. A crawl stuck finishing (its output cannot be written) can be
        cancelled too: its finisher then gives up the files it cannot write."""
        status = self.status()
        if status is Status.FINISHING:
            self.client.hset(self.ck.state, mapping={"cancelled": "1"})
            return True
        if status is Status.CANCELLING:
            return True
        steer = {"cancelled": "1", "paused": "0", "status": Status.CANCELLING.value}
        if not self._steer(steer, wake=True):
            return False
        # Every partition learns it too: start.lua stops fetches there, release.lua releases
        # nothing more; and a cancel ends a pause.
        self._flag_partitions("cancelled", "1")
        self._flag_partitions("paused", "0")
        return True

    def failed_with(self, why: str) -> bool:
        """The crawl cannot go on (its extraction hook cannot be imported): stopped as by a
        cancel, with ``why`` shown by status, progress() and the summary (``error``). True
        the first time."""
        if not self.client.hsetnx(self.ck.state, "error", why):
            return False
        self.cancel()
        return True

    def _steer(self, mapping: dict[str, str], wake: bool = False) -> bool:
        """Apply ``mapping`` to the state hash unless the crawl is finished, atomically
        (WATCH): a crawl finishing meanwhile is never revived as paused or running."""

        def apply(pipe: redis.client.Pipeline) -> bool:
            raw = pipe.hget(self.ck.state, "status")
            # Finishing: emptied, its finisher at work (recorder.py); it can only finish.
            if raw is None or raw.decode() in _NOT_STEERABLE:
                return False
            pipe.multi()
            pipe.hset(self.ck.state, mapping=mapping)
            return True

        steered = bool(self.client.transaction(apply, self.ck.state, value_from_callable=True))
        # After the transaction: the listing is outside the crawl's hash slot (Redis Cluster).
        if steered and wake:
            self.client.sadd(self.keys.running, self.crawl_id)
        return steered

    def reopen(self) -> None:
        """Running again (retry_failed), once its replays are counted: a crawl that looked
        drained in between would be marked finishing."""
        self.client.hset(self.ck.state, mapping={"status": Status.RUNNING.value})
        self.client.hdel(self.ck.state, "finished_at")
        self.client.sadd(self.keys.running, self.crawl_id)

    # --- completion --------------------------------------------------------------------------
    def drained(self) -> bool:
        """True if no URL of the crawl is outstanding. Each partition counts the URLs admitted
        into it ("in") and those that reached a final state ("out"), but no command reads all
        partitions at once; so every "out" is read first, then every "in": if the sums are
        equal, then at the moment between the two reads every admitted URL was final, and as
        a URL is admitted only by a task of an outstanding one (its children are admitted
        before it finishes), nothing can be admitted after that."""
        parts = self.ck.parts
        if len(parts) == 1:
            got = self.client.hmget(parts[0].flow, "in", "out")
            return int(got[0] or 0) == int(got[1] or 0)
        return self.flow("out") >= self.flow("in")

    def flow(self, field: str) -> int:
        """``field`` ("in" or "out") of the flow hashes, summed over the partitions."""
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hget(pk.flow, field)
        return sum(int(v or 0) for v in pipe.execute())

    def finishing(self) -> bool:
        """True if the crawl is finishing: marked now (finishing.lua) because it is drained,
        or earlier. Called when a partition empties, by redelivered tasks and dispatchers."""
        status = self.client.hget(self.ck.state, "status")
        if status == Status.FINISHING.value.encode():
            return True
        if status not in _RUNNING or not self.drained():
            return False
        return bool(self.scripts.finishing(keys=[self.ck.state], client=self.client))

    # --- notes (facts of the crawl, for status and the summary) ----------------------------
    def note(self, note: Note, value: object = 1) -> None:
        """Record a fact of the crawl (summary_path, on_finished_sent...)."""
        self.client.hset(self.ck.state, note.value, str(value))

    def first_note(self, note: Note, value: str) -> None:
        """Note ``value`` unless an earlier one is there (a first example, for the summary)."""
        self.client.hsetnx(self.ck.state, note.value, value)

    def first(self, note: Note) -> bool:
        """True the first time ``note`` is set (HSETNX): something done once per crawl."""
        return bool(self.client.hsetnx(self.ck.state, note.value, "1"))


#: Statuses pause and resume leave alone (cancel() handles its own before steering).
_NOT_STEERABLE = tuple(
    s.value for s in (Status.FINISHED, Status.CANCELLED, Status.FINISHING, Status.CANCELLING)
)
#: Statuses of a crawl whose URLs may still be outstanding (finishing() checks them).
_RUNNING = tuple(s.value.encode() for s in (Status.RUNNING, Status.PAUSED, Status.CANCELLING))


def steering_of(values: list[Any]) -> Steering:
    """:meth:`CrawlLifecycle.steering` from its HMGET's reply."""
    paused, cancelled, status, blocked = values
    if status == Status.FINISHING.value.encode():
        return Steering.FINISHING
    if cancelled == b"1":
        return Steering.CANCELLED
    if paused == b"1" or blocked is not None:  # blocked: until a probe finds room
        return Steering.PAUSED
    return Steering.RUN
