"""Release rounds: moving URLs from the frontier into the fetch queues when their hosts may be
fetched. release.lua decides, atomically, so any number of dispatchers may run at once; a
round here decides only how much to ask for (the broker's backlog) and where what it got goes
(host ceilings, then host affinity: routing.py), and publishes it.
"""

from __future__ import annotations

import logging
import math
import time

from ...errors import ObjectMissing, StoreUnavailable
from ...settings import Settings
from ...state import registry
from ...state.formats import LeaseEnd, Steering
from ...state.frontier import CANCEL_BATCH
from ...state.politeness import cluster_rates
from ...state.status import steering_of
from ...state.store import CrawlStore
from ..process import faults
from ..process.logs import Throttled
from ..process.queues import BrokerView
from ..runtime.context import Context
from ..visit.recorder import crawl_finished
from .repair import Repair
from .routing import REFRESH_EVERY, HostRouter
from .tails_guard import TailsGuard

log = logging.getLogger(__name__)

Released = list[tuple[str, int, str]]  # (domain, depth, url), as release.lua hands them out


class Rounds:
    def __init__(
        self, settings: Settings, broker: BrokerView, router: HostRouter, repair: Repair
    ) -> None:
        self.settings = settings
        self._broker = broker
        self._router = router
        self._repair = repair
        self._rates, self._rates_read = "", -math.inf
        self._round = 0
        #: Crawls whose directory chunk store this machine does not share: tails not tended.
        self._tails_guard = TailsGuard()
        #: The running crawls of the last survey: their steering is read in the next one.
        self._running: list[str] = []
        #: Whether the last round stopped at a release call's limit (more may be ready now).
        self.more = False
        self._chunks_away = Throttled(log, "frontier chunk store", every=30.0)

    def tick(self, ctx: Context) -> bool:
        """One release round over all running crawls; True if anything was released. Sets
        ``more`` if a release call stopped at its limit (more may be ready now); otherwise the
        next round waits ``dispatch_interval``: everything ready was released, or the budget
        is spent, and a round at once would release one or two URLs (each one message, not
        one message of several) for the cost of a full round."""
        s = self.settings
        busy = self.more = False
        rates = self._cluster_rates(ctx)  # first: the direct queues _survey counts
        running, budget, steering = self._survey(ctx)
        with ctx.publisher.together():  # the round's fetch messages in one round trip
            for crawl_id in running:
                store = ctx.store(crawl_id)
                if store is None or budget == 0:
                    continue
                state = steering.get(crawl_id) or store.lifecycle.steering()
                if state is Steering.FINISHING:
                    self._repair.finish_abandoned(ctx, store)
                    continue
                parts = len(store.ck.parts)
                self._round += 1
                if state is Steering.CANCELLED:
                    busy = self._cancel(ctx, store) or busy
                    continue
                tend = store.frontier.tails.spills and self._tails_guard.may_tend(store)
                for i in range(parts):  # a different partition first each round: none starves
                    part = (self._round + i) % parts
                    # The hosts' tails first (state/tails.py): a refilled head is released in
                    # this same round, and a full spill buffer leaves Redis before more come.
                    # A crawl without a chunk store never spills: no round trip for it.
                    if tend:
                        self._tend(store, part)
                    if budget == 0:
                        break
                    released = self._release(ctx, store, part, budget, rates, state)
                    if budget is not None:
                        budget = max(0, budget - released)
                    busy = busy or released > 0
                    self.more = self.more or released >= s.dispatch_batch
        return busy

    def _tend(self, store: CrawlStore, part: int) -> None:
        """The partition's flushes and refills. Its chunk store away (an s3:// crawl's store
        down) costs only them: a full buffer stays in Redis and a host waiting for a refill
        waits, nothing moved (tails.py writes the chunk before the swap, reads it before the
        move), while every other host is released as before; each is tried again next round.
        A chunk that is not there at all (ObjectMissing) is a loss, raised."""
        try:
            store.frontier.tails.tend(part, point=faults.point)
        except ObjectMissing:
            raise
        except StoreUnavailable as exc:
            self._chunks_away.failed(exc)
            return
        self._chunks_away.ok()

    def _cancel(self, ctx: Context, store: CrawlStore) -> bool:
        """A cancelled crawl: up to CANCEL_BATCH of its pending URLs counted cancelled in each
        partition (cancel.lua), no fetch budget spent, no URL handed out; the crawl finished
        by whoever empties it (its URLs in flight may be the last, recorder.py). A call takes a
        few ms of Redis whatever the backlog, so a neighbour's round is not held up."""
        counted, left = 0, 0
        for part in range(len(store.ck.parts)):
            got = store.frontier.cancel_pending(part, CANCEL_BATCH)
            counted, left = counted + got.counted, left + got.left
            self.more = self.more or got.counted >= CANCEL_BATCH
        # Nothing outstanding: finish it (finishing() reads every partition again, atomically
        # enough: see CrawlLifecycle.drained).
        if left == 0 and store.lifecycle.finishing():
            crawl_finished(ctx, store)
        return counted > 0

    def _release(
        self,
        ctx: Context,
        store: CrawlStore,
        part: int,
        budget: int | None,
        rates: str,
        state: Steering,
    ) -> int:
        """release.lua on one partition, and the follow-up of what it handed out (never
        called for a cancelled crawl: release.lua would release nothing)."""
        s = self.settings
        release = store.frontier.release(
            part,
            s.dispatch_batch,
            s.lease_seconds,
            ctx.worker_id,
            budget=budget,
            cluster_rates=rates,
            state=state,
            holders=tuple(self._router.holders()),
        )
        entries = release.entries
        if release.resolve:
            ctx.addresses.ask(store, release.resolve)  # worker/runtime/addresses.py
        if ctx.ceilings.rates():
            entries = self._within_ceilings(ctx, store, entries)
        tier = store.opts.tier
        routed = [(d, tier(depth, s.medium_max_depth), url, depth) for d, depth, url in entries]
        size = s.urls_per_message
        for queue, items in self._router.queues(store.id, routed).items():
            for i in range(0, len(items), size):  # released together, so sent together
                ctx.publisher.fetch(store.id, items[i : i + size], queue)
        return len(release.entries)

    def _cluster_rates(self, ctx: Context) -> str:
        """`crawler set-rate` overrides and the fetch processes that hold hosts, read at most
        once a second (they change rarely; so do ceilings, which ctx.ceilings rereads)."""
        now = time.monotonic()
        if now - self._rates_read >= REFRESH_EVERY:
            self._rates, self._rates_read = cluster_rates(ctx.client, ctx.keys), now
            self._router.refresh(ctx)
        return self._rates

    def _within_ceilings(self, ctx: Context, store: CrawlStore, entries: Released) -> Released:
        """The released entries a host's shared ceiling lets go now; the others go back to
        the frontier (due when the ceiling allows), their leases refunded (their tokens
        back: no request was sent)."""
        by_domain: dict[str, Released] = {}
        for entry in entries:
            by_domain.setdefault(entry[0], []).append(entry)
        kept: Released = []
        rates = ctx.ceilings.rates()
        for domain, some in by_domain.items():
            rate = rates.get(domain)
            if rate is None:
                kept += some
                continue
            charged = ctx.ceilings.charge(domain, rate, len(some))
            kept += some[: charged.allowed]
            for _d, depth, url in some[charged.allowed :]:
                store.politeness.lease(url, domain).release(LeaseEnd.REFUND)
                store.ledger.requeue(domain, depth, url, charged.wait)
        return kept

    def _survey(self, ctx: Context) -> tuple[list[str], int | None, dict[str, Steering]]:
        """The running crawls, and how many URLs to release now: while the broker's fetch
        queues hold messages, every pool slot is taken (a free slot takes a message at once),
        and a host released now would wait behind them; so release only up to
        ``dispatch_queue_max`` waiting messages (of up to ``fetch_batch`` URLs each).
        None (no cap) when the broker is not a Redis this process can read. Nothing while
        Redis has no room for the links of what would be fetched (room.py).
        One round trip when the broker is the crawl state's Redis (the default), with the
        steering of the crawls running at the last survey (read once a round, issue 32)."""
        if ctx.room.full():
            return [], 0, {}
        limit = self.settings.dispatch_queue_max
        if limit <= 0:
            return registry.running(ctx.r), None, {}
        keys = ctx.keys
        known = [(c, s) for c in self._running if (s := ctx.store(c)) is not None]
        reads = [s.lifecycle.steering_read() for _, s in known]
        holders = self._router.holders()
        look = self._broker.survey(ctx.client, holders, keys.running, keys.fetchers, reads)
        if look.waiting is None:
            return registry.running(ctx.r), None, {}
        if self._router.lengths(look.direct, look.fetchers):
            self._rates_read = -math.inf  # a fetch process joined: holders again at once
        running = look.running if look.running is not None else registry.running(ctx.r)
        self._running = running
        replies = look.reads or []
        steering = {c: steering_of(v) for (c, _), v in zip(known, replies, strict=False)}
        return running, max(0, limit - look.waiting) * self.settings.urls_per_message, steering
