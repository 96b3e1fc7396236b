"""Lost messages: which in-flight URLs nobody will move, for the repair (repair.py).

A URL released to a living fetch process ("r:<holder>", release.lua) may still lose its
message. Host affinity marks a released URL as its host's process even when it is published
to a shared fetch queue (a crawl of few hosts, or a busy holder), so any fetch process may
take it; the one that does holds it in its memory only (broker.QoS: no unacked record for a
fetch message). If that process is then killed, or was frozen with a BRPOP pending (Redis
hands the message to a socket nobody reads), the message is gone while the URL still names a
living process: no dead-process rule takes it back (issue 50 saw such URLs wait 17-25 s,
taken back only by the lost-message rule's 15 s, and a one-host crawl stalled behind them).

So a released URL is lost once all of these hold:

* it was released ``FETCH_LOST_AFTER`` s ago and is still unstarted;
* its message is in no fetch queue (the shared ones and every fetch process's own, read
  message by message: a busy crawl's queues are rarely all empty);
* no living process says it holds it (its held set, written with each heartbeat);
* and that is still so after every living process beat again since it was first seen
  missing (a message taken from its queue just before the look is in its taker's held set
  only from that process's next beat on). A process frozen but not yet judged dead does not
  beat: until it is judged dead, what it may hold is not taken back.

Bounded: ``FETCH_LOST_AFTER`` + a reclaim interval + a heartbeat and a reclaim interval
(about 3 + 2 + 4 s), instead of ``lost_message_seconds`` (15 s) plus the same. Parse and render
messages keep that rule (no held set tells who holds them).
"""

from __future__ import annotations

from ...state import workers
from ...state.formats import Inflight
from ..process.queues import FETCH_QUEUES, BrokerView, _fetch_urls, _lists, direct_queue
from ..runtime.context import Context

#: Seconds a released URL may wait unstarted before its message is looked for: longer than
#: the dispatcher's release-then-publish (one round) and a start's round trip on a busy
#: machine; what is still in a queue or held by a process is never taken for lost anyway.
FETCH_LOST_AFTER = 3.0
#: Seconds a living process's beat must come after a message was first seen missing to count
#: as "beat again": a beat writes its held set first and its time after (Heartbeat.beat);
#: this covers the held set's snapshot taken a moment before that time.
BEAT_MARGIN = 0.5

Stuck = list[tuple[str, Inflight, str]]


class LostMessages:
    def __init__(self, broker: BrokerView, dead_after: float) -> None:
        self._broker = broker
        self._dead_after = dead_after
        #: crawl -> {"crawl<TAB>url": Redis time} of the messages found lost at the last look
        #: and not yet confirmed (see :meth:`_unconfirmed`).
        self._suspects: dict[str, dict[str, float]] = {}

    @property
    def fetch_after(self) -> float | None:
        """``FETCH_LOST_AFTER`` where the fetch queues can be read message by message (a
        Redis broker); None elsewhere: only the lost-message rule applies."""
        return FETCH_LOST_AFTER if self._broker.sees_queues else None

    def forget_crawls(self, running: list[str]) -> None:
        self._suspects = {c: v for c, v in self._suspects.items() if c in running}

    def queued(self, ctx: Context, fetchers: list[str]) -> set[str] | None:
        """ "crawl<TAB>url" of every fetch message waiting in a fetch queue (the shared ones
        and ``fetchers``' own), read in one round trip; None when the broker is not a Redis
        this process reads (then only the lost-message rule's idle queues say "lost")."""
        broker = self._broker.client(ctx.client) if self._broker.sees_queues else None
        if broker is None:
            return None
        pipe = broker.pipeline(transaction=False)
        for queue in (*FETCH_QUEUES, *map(direct_queue, fetchers)):
            for name in _lists(queue):
                pipe.lrange(name, 0, -1)
        return {u for messages in pipe.execute() for raw in messages for u in _fetch_urls(raw)}

    def really_stuck(
        self,
        ctx: Context,
        crawl_id: str,
        stuck: Stuck,
        living: set[str],
        queued: set[str] | None,
    ) -> Stuck:
        """``stuck`` less what a second look clears: a worker that beat since the heartbeats
        were read (a process whose first beat came after that read), a message still in a
        fetch queue (``queued``), and a message that a living process says it holds
        (received, waiting for a thread: not lost)."""
        if not stuck:
            return []
        silent = {e.worker for _, e, _ in stuck if e.worker and e.worker not in living}
        if silent:
            now_alive = workers.alive(ctx.client, ctx.keys, self._dead_after)
            living = living | (now_alive & silent)

        def key(url: str) -> str:
            return f"{crawl_id}\t{url}"

        late = [key(url) for url, e, _ in stuck if e.stage == "r" and e.worker in living]
        waiting = {k for k in late if queued is not None and k in queued}
        held = workers.held_by(ctx.client, ctx.keys, living, [k for k in late if k not in waiting])
        held |= waiting
        held |= self._unconfirmed(ctx, crawl_id, [k for k in late if k not in held], living)

        def still(url: str, e: Inflight) -> bool:
            if e.stage in ("q", "v"):  # its parse or render message is late (no worker named)
                return True
            if e.worker not in living:  # silent after a second look
                return True
            # Released to a living process, unstarted, in no queue: lost unless held.
            return e.stage == "r" and key(url) not in held

        return [(url, e, v) for url, e, v in stuck if still(url, e)]

    def _unconfirmed(
        self, ctx: Context, crawl_id: str, lost: list[str], living: set[str]
    ) -> set[str]:
        """Of the fetch messages found lost (released to a living process, unstarted, in no
        fetch queue, in no process's held set), those not lost for sure yet: a message a
        process took from its queue just before the look is in its held set only from that
        process's next beat on (every HEARTBEAT_EVERY s, later when it is starved; the
        overload test saw such URLs taken back from a busy crawl). One is lost once it is
        still missing after every living process beat again."""
        if not lost:
            self._suspects.pop(crawl_id, None)
            return set()
        beats, now = workers.beats(ctx.client, ctx.keys), workers.redis_now(ctx.client)
        all_beat_at = min((beats.get(w, 0.0) for w in living), default=now + BEAT_MARGIN)
        seen = self._suspects.get(crawl_id, {})
        first = {k: seen.get(k, now) for k in lost}
        self._suspects[crawl_id] = first  # those no longer lost are forgotten
        return {k for k, t in first.items() if all_beat_at <= t + BEAT_MARGIN}
