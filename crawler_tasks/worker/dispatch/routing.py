"""Host affinity: which fetch process a released host's URLs go to, in one class.

A fetch process (one OS process that takes every fetch queue: a threads, gevent or solo pool)
keeps its hosts' connections open; a host's released URLs go to one such process, through that
process's own queue (queues.direct_queue), while it beats, so its next page finds its
connection open. As Scrapy's ``DownloaderAwarePriorityQueue`` keeps the choice of a download
slot in one class, :class:`HostRouter` keeps every affinity decision here:

* who holds hosts: the live joined fetch processes (state/workers.py), refreshed once a second;
  a dead one's queue is deleted (its URLs are marked as its own by release.lua, so reclaim
  takes them back, and its messages would only fetch them twice);
* which process holds a host: rendezvous hashing (workers.holder, the same hash as
  release.lua, which marks each released URL as its holder's);
* when not to use it: a crawl of few hosts (one host's pages on one process would leave the
  others idle: bench/crawl.py 389 -> 266 pages/s with affinity), or a holder that is busy
  while another process is idle.

The dispatcher asks it three things: :meth:`holders` (for release.lua), :meth:`refresh`
(once a second) and :meth:`queues` (where a round's released URLs go); a worker starting
asks :func:`own_queue` whether it is a fetch process with a queue of its own.
"""

from __future__ import annotations

import logging
import time

from ...state import workers
from ...state.workers import Affinity
from ..process.queues import FETCH_QUEUES, BrokerView, direct_queue
from ..process.stall import StallGuard
from ..runtime.context import Context

log = logging.getLogger(__name__)

#: Messages a fetch process's direct queue may hold while another's is empty before its hosts'
#: URLs go to the shared queues instead: a process with a free thread takes a message at once,
#: so it is busy while another is not (a crawl of one host would use one process). When every
#: fetch process is busy, hosts stay where their connections are.
DIRECT_QUEUE_MAX = 2
#: Hosts in one release round, per fetch process, from which their URLs go to their hosts'
#: processes (fewer: the shared queues).
AFFINITY_MIN_HOSTS = 1
AFFINITY_WINDOW = 5.0
#: Seconds between two reads of who holds hosts (:meth:`HostRouter.refresh`, from the
#: dispatcher's rounds).
REFRESH_EVERY = 1.0
#: Pools whose tasks all run in the worker's own process: a direct queue reaches the process
#: that holds the connections (a prefork worker's would reach any of its children).
ONE_PROCESS_POOLS = ("thread", "gevent", "eventlet", "solo")


def own_queue(consumed: list[str], pool: str, process: str) -> str | None:
    """The direct queue a starting worker takes first, if it is a fetch process: one process
    (``pool``: its pool class's module) taking every fetch queue (the Procfile's, compose's
    and the local workers' fetch workers). A worker given only some fetch queues (-Q
    crawl.low) or a prefork pool gets none, so nothing is sent to it that it would not take."""
    if not set(FETCH_QUEUES) <= set(consumed) or not pool.endswith(ONE_PROCESS_POOLS):
        return None
    return direct_queue(process)


class HostRouter:
    def __init__(self, broker: BrokerView, dead_after: float, joins: bool = False) -> None:
        self._broker = broker
        self._dead_after = dead_after
        #: This process takes its hosts' URLs from its own queue (lifecycle._after_setup):
        #: it joins the holders from the dispatcher's first round on, in the dispatcher's
        #: thread (a full Redis refuses the join, and the worker's start could not wait).
        self._joins = joins
        #: Whether it has joined (a leaving process that never joined is nobody's holder).
        self.joined = False
        #: Its warm shutdown began (seen in ``leaving``, departure.py): it does not join again.
        self._departing = False
        #: Live fetch processes with a direct queue, and their queues' lengths.
        self._holders: list[str] = []
        self._direct: dict[str, int] = {}
        #: Fetch processes in a warm shutdown (workers.depart): no holders, not new either.
        self._leaving: set[str] = set()
        #: crawl id -> host -> when this dispatcher last released one of its URLs (monotonic)
        self._recent: dict[str, dict[str, float]] = {}
        #: A refresh after this process (or Redis) was held up deletes no process's queue at
        #: once (stall.py): a living process would lose the messages in it, and their URLs
        #: would be taken back from it.
        self._stall = StallGuard(REFRESH_EVERY, dead_after, "host affinity")

    def holders(self) -> list[str]:
        """The processes release.lua marks URLs as held by (a copy: the round's own)."""
        return list(self._holders)

    def join(self, ctx: Context) -> None:
        """This process joins the holders, once (before the first round)."""
        if self._joins:
            workers.join(ctx.client, ctx.keys, ctx.worker_id)
            self._joins, self.joined = False, True

    def _rejoin(self, ctx: Context, members: Affinity) -> None:
        """Join again if another dispatcher took this process for dead and removed it from
        the holders (a process frozen past worker_dead_seconds, then woken): its URLs were
        taken back and its queue deleted, but it is alive and takes its queue again (a
        publish to a deleted queue creates it). Without this it got no host of its own for
        the rest of its life (issue 50). Its next beat makes it live to every dispatcher,
        whose next refresh routes hosts to it again. Not once it was seen leaving (a warm
        shutdown: departure.py removes it itself, after its dispatcher stopped)."""
        self._departing = self._departing or ctx.worker_id in members.leaving
        if not self.joined or self._departing:
            return
        if ctx.worker_id in (*members.live, *members.leaving, *members.dead):
            return
        workers.join(ctx.client, ctx.keys, ctx.worker_id)
        log.warning("joined the fetch processes again (taken for dead while held up)")

    def refresh(self, ctx: Context) -> None:
        """Which fetch processes hold hosts now (every ``REFRESH_EVERY`` s). A dead one's
        direct queue is deleted, and also the queues of processes this dispatcher routed to
        until now that another dispatcher has already seen die: it may have published to
        them since. A leaving one (in a warm shutdown) holds no hosts any more, but its queue
        is its own to hand back (worker/dispatch/departure.py): deleting it would lose the messages
        still in it. Right after a stall only the processes that beat since hold hosts, and
        no queue is deleted: the others' beats may be late only because of the stall."""
        quiet = self._stall.quiet()
        members = workers.affine(ctx.client, ctx.keys, self._dead_after)
        self._rejoin(ctx, members)
        live, leaving, dead = members
        if not (quiet or self._stall.held_up()):  # held up before its read: stale beats
            for worker in sorted(set(dead) | (set(self._holders) - set(live) - set(leaving))):
                self._broker.delete_direct(ctx.client, worker)
            for worker in dead:
                workers.leave(ctx.client, ctx.keys, worker)
        self._holders, self._leaving = live, set(leaving)
        self._direct = {w: n for w, n in self._direct.items() if w in live}

    def hold(self, seconds: float) -> None:
        """No process's queue deleted for ``seconds`` (the dispatcher saw Redis fail)."""
        self._stall.hold(seconds)

    def lengths(self, direct: dict[str, int], fetchers: set[str] | None) -> bool:
        """The direct queues' lengths of this round; True when a fetch process joined that is
        not a holder yet (hosts move to it now, not after their first pages opened
        connections in the processes that held them for up to a second)."""
        self._direct = direct
        return fetchers is not None and not fetchers <= set(self._holders) | self._leaving

    def queues(
        self, crawl_id: str, released: list[tuple[str, str, str, int]]
    ) -> dict[str, list[tuple[str, int]]]:
        """Where a round's released URLs go: ``released`` holds (domain, tier queue, url,
        depth); returns queue -> [(url, depth)], each URL to its host's holder's own queue
        or to its tier's shared queue."""
        affine = self._many_hosts(crawl_id, {r[0] for r in released})
        out: dict[str, list[tuple[str, int]]] = {}
        for domain, tier, url, depth in released:
            queue = self._route(domain, tier) if affine else tier
            out.setdefault(queue, []).append((url, depth))
        return out

    def _many_hosts(self, crawl_id: str, domains: set[str]) -> bool:
        """Did this dispatcher release AFFINITY_MIN_HOSTS hosts per process lately?"""
        now = time.monotonic()
        seen = self._recent.setdefault(crawl_id, {})
        seen.update(dict.fromkeys(domains, now))
        if len(seen) > 4 * AFFINITY_MIN_HOSTS * max(len(self._holders), 1):
            for d in [d for d, t in seen.items() if now - t > AFFINITY_WINDOW]:
                del seen[d]
        recent = sum(1 for t in seen.values() if now - t <= AFFINITY_WINDOW)
        return recent >= AFFINITY_MIN_HOSTS * len(self._holders)

    def _route(self, domain: str, tier: str) -> str:
        """The direct queue of the process holding ``domain``'s connections, unless that
        process is busy (its queue holds messages) while another is not (its queue is empty);
        then the shared ``tier`` queue. Either way the URL is marked as that process's
        (release.lua): taken back if it dies."""
        held_by = workers.holder(domain, self._holders)
        if held_by is None:
            return tier
        waiting = self._direct.get(held_by, 0)
        if waiting >= DIRECT_QUEUE_MAX and min(self._direct.values(), default=0) == 0:
            return tier
        return direct_queue(held_by)
