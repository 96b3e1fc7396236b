"""A fetch process's warm shutdown, for host affinity (routing.py): it leaves the holders in
two steps, so that no URL is routed to a process that is gone, and none is taken back from
one that is still working on it.

Before (issue 33), a stopped fetch process stayed in ``fetchers`` with a fresh heartbeat for
up to ``worker_dead_seconds``: a dispatcher starting in that time (the next start of a
cluster) counted it as a holder and published its hosts' URLs to its queue, which nobody
consumed; the repair then took them back as lost ("took ... back (r:<the stopped process>:
...)").

* :meth:`Departure.begin` (the worker's shutdown begins, before its pool drains): the process
  is leaving (``workers.depart``). Dispatchers route it nothing new from their next refresh
  on and do not delete its queue, and its heartbeat goes on: what it is still working on is
  not taken back.
* :meth:`Departure.end` (its pool has drained): the URLs still in its queue go back to the
  frontier (no retry spent, their leases refunded: no request was sent), its queue and
  bindings are deleted and it leaves ``fetchers``.

Its heartbeat is left to age: a URL released as its own that waits in a shared queue is
started by another process meanwhile, not taken back at once. A process killed on the way is
dead like any other (routing.HostRouter.refresh, repair.Repair.reclaim).
"""

from __future__ import annotations

import logging
import time

from ...state import workers
from ...state.formats import LeaseEnd
from ..process.queues import BrokerView
from ..runtime.context import Context

log = logging.getLogger(__name__)

#: Seconds from :meth:`Departure.begin` before the queue is emptied: every dispatcher reads
#: the holders once a second (rounds.Rounds._cluster_rates), so what one published with the
#: holders read before the process began leaving is in the queue by then, not after it.
SETTLE_SECONDS = 1.5


class Departure:
    def __init__(self, broker: BrokerView, worker: str) -> None:
        self._broker = broker
        self.worker = worker
        self._began: float | None = None

    def begin(self, ctx: Context) -> None:
        """No new hosts' URLs for this process (its queue and heartbeat stay)."""
        workers.depart(ctx.client, ctx.keys, self.worker)
        self._began = time.monotonic()

    def end(self, ctx: Context) -> int:
        """Hand back what is still in this process's queue and leave the holders; the number
        of URLs handed back."""
        if self._began is not None:
            time.sleep(max(0.0, self._began + SETTLE_SECONDS - time.monotonic()))
        queued = self._broker.take_direct(ctx.client, self.worker)
        handed = sum(self._hand_back(ctx, key) for key in queued)
        self._broker.delete_direct(ctx.client, self.worker)  # its bindings too
        workers.leave(ctx.client, ctx.keys, self.worker)
        if handed:
            log.warning("left the fetch processes: %d unstarted URLs back to the frontier", handed)
        return handed

    def _hand_back(self, ctx: Context, key: str) -> int:
        """One URL of a message in this process's queue back to the frontier, if it is still
        released as this process's and unstarted (a duplicate message, or one begun elsewhere,
        is left alone)."""
        crawl_id, _, url = key.partition("\t")
        store = ctx.store(crawl_id)
        read = store.ledger.entry(url) if store is not None else None
        if store is None or read is None:
            return 0
        entry, value = read
        if entry.stage != "r" or entry.worker != self.worker:
            return 0
        if not store.ledger.reclaim(url, entry, value):
            return 0  # moved on meanwhile
        store.politeness.lease(url, entry.domain).release(LeaseEnd.REFUND)
        return 1
