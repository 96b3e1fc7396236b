"""Repair: what dead processes and lost messages left behind, done by every dispatcher.

* :meth:`Repair.reclaim` (every few seconds): URLs held by workers that stopped beating, or
  whose message was lost, go back to the frontier (or fail after ``max_retries``: the one
  retry rule, settle.attempt); records a dead process did not write are written
  (``recorder.sweep_orphans``); a crawl whose last URL's process died before finishing it is
  finished.
* :meth:`Repair.reap` (rarely): a fetch whose message never reached a worker is published
  again.
* :meth:`Repair.finish_abandoned`: a crawl left finishing by a finisher that died, or that
  waited for its output's disk.
"""

from __future__ import annotations

import logging
import time

from ...errors import WorkerLost
from ...settings import Settings
from ...state import registry, workers
from ...state.formats import Inflight, LeaseEnd, Steering
from ...state.option_checks import reap_after
from ...state.store import CrawlStore
from ..process.queues import BrokerView
from ..process.stall import StallGuard
from ..runtime.context import Context
from ..runtime.handoff import Stage
from ..runtime.room import probe_output
from ..visit.outcome import Decision
from ..visit.recorder import crawl_finished, sweep_orphans
from ..visit.settle import settle, takeback
from ..visit.trip import Visit
from .lost import LostMessages

log = logging.getLogger(__name__)

#: Seconds between two looks for URLs of dead workers and unwritten records (an HSCAN of
#: each running crawl's in-flight hash: a few hundred entries on a broad crawl).
RECLAIM_EVERY = 2.0


class Repair:
    def __init__(self, settings: Settings, broker: BrokerView) -> None:
        self.settings = settings
        self._broker = broker
        #: A reclaim after this process was held up judges nobody dead at once (stall.py).
        self._stall = StallGuard(RECLAIM_EVERY, settings.worker_dead_seconds, "repair")
        #: Which unstarted URLs lost their message (lost.py).
        self._lost = LostMessages(broker, settings.worker_dead_seconds)

    def reap(self, ctx: Context) -> int:
        """Publish again fetches whose message never reached a worker. Rare (a dispatcher
        killed between release.lua and the publish); a duplicate is harmless because every
        task is idempotent, so the threshold only has to exceed any normal queueing delay."""
        n = 0
        for crawl_id in registry.running(ctx.r):
            store = ctx.store(crawl_id)
            if store is None:
                continue
            older_than = reap_after(self.settings.visibility_timeout, store.opts)
            for url, depth in store.ledger.stale_releases(older_than):
                log.warning("re-publishing lost fetch of %s (crawl %s)", url, store.id)
                tier = store.opts.tier(depth, self.settings.medium_max_depth)
                ctx.publisher.fetch(store.id, [(url, depth)], tier)
                n += 1
        return n

    def reclaim(self, ctx: Context) -> int:
        """Take back URLs held by workers that stopped beating or whose message was lost;
        write records dead processes left."""
        s = self.settings
        if self._stall.quiet():
            return 0
        living = workers.alive(ctx.client, ctx.keys, s.worker_dead_seconds)
        fetchers = sorted(m.decode() for m in ctx.client.smembers(ctx.keys.fetchers))
        idle = self._broker.idle_stages(fetchers)
        n, running = 0, registry.running(ctx.r)
        self._lost.forget_crawls(running)
        # Which fetch messages wait in a queue: read once a round, when a fetch is late.
        queued: set[str] | None = None
        for crawl_id in running:
            store = ctx.store(crawl_id)
            if store is None:
                continue
            stuck = store.ledger.stuck(living, s.lost_message_seconds, idle, self._lost.fetch_after)
            if queued is None and any(e.stage == "r" and e.worker in living for _, e, _ in stuck):
                queued = self._lost.queued(ctx, fetchers)
            lost = self._lost.really_stuck(ctx, store.id, stuck, living, queued)
            if lost and self._stall.held_up():  # its reads came after a stall: stale
                return n
            for url, entry, value in lost:
                n += self._take_back(ctx, store, url, entry, value)
            sweep_orphans(ctx, store)
            probe_output(store, s.output_dir)  # a full disk: found by a write, not a fetch
            store.series.sample()  # one process per interval cluster-wide (series.py)
            # A process that died between finishing the last URL and CrawlLifecycle.finishing.
            finishing = store.lifecycle.steering() is Steering.FINISHING
            if not finishing and store.lifecycle.finishing():
                crawl_finished(ctx, store)
        if not self._stall.held_up():  # after a stall of its own, beats read late are no proof
            gone = workers.forget_dead(ctx.client, ctx.keys, s.worker_dead_seconds)
            if gone:
                log.info("forgot the heartbeats of %d dead processes", len(gone))
        return n

    def _take_back(
        self, ctx: Context, store: CrawlStore, url: str, entry: Inflight, value: str
    ) -> int:
        """A URL whose worker or message was lost: final after ``max_retries``, else back to
        the frontier (a fetch; its lease returned as an error) or its parse or render
        published again."""
        fetching = entry.stage in ("r", "s")
        lease = store.politeness.lease(url, entry.domain) if fetching else None
        lost = WorkerLost(f"{entry.stage}:{entry.worker}: its worker or message was lost")
        attempts = takeback(store, url)  # not an attempt: a stalled process may be alive
        if attempts.last:
            failed = Decision.record(attempts.failed(url, entry.depth, lost), LeaseEnd.ERROR)
            settle(Visit.at(ctx, store, url, entry.depth), failed, lease)
            return 1
        if not store.ledger.reclaim(url, entry, value):
            return 0  # moved on meanwhile: the lease is not ours to return
        log.warning("crawl %s: took %.300s back (%s)", store.id, url, lost)
        if lease is not None:  # its lease, or the host waits for the lease to expire
            lease.release(LeaseEnd.ERROR)
        else:  # its body waits for a render ("v", "w") or a parse
            stage = Stage.RENDER if entry.stage in ("v", "w") else Stage.PARSE
            ctx.publisher.hand_off(store, url, entry.depth, stage)
        return 1

    def finish_abandoned(self, ctx: Context, store: CrawlStore) -> None:
        """A crawl left finishing longer than a live finisher takes: its finisher died, or
        its output could not be written (tried again once the output pause is over)."""
        state = store.lifecycle.read()
        finished_at = state.finished_at or 0.0
        if state.output_blocked_until > time.time():
            return
        # Its finisher gave up for the disk: again as soon as the pause is over.
        waited_for_output = state.output_problem is not None
        if waited_for_output or (
            finished_at and time.time() - finished_at > self.settings.orphan_record_seconds
        ):
            crawl_finished(ctx, store)
