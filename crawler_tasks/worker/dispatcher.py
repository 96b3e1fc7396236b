"""The dispatcher: a thread in every worker's main process that moves URLs from the frontier
into the fetch queues when their domain may be fetched (release.lua decides, atomically, so
any number of dispatchers may run at once). It is what keeps the broker small: nothing is
published before its domain is ready, and no task waits for a token.

Between release rounds it also repairs what dead processes left behind, every few seconds:
URLs held by workers that stopped beating go back to the frontier (``reclaim``), records a
dead process did not write are written (``recorder.sweep_orphans``), a crawl whose finisher
died is finished, and, rarely, a fetch whose message was lost is published again (``reap``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

import redis

from ..errors import WorkerLost
from ..settings import Settings
from ..state import ceilings, workers
from ..state import store as stores
from ..state.formats import Inflight, LeaseEnd, Steering
from ..state.frontier import CANCEL_DRAIN
from ..state.politeness import cluster_rates
from ..state.store import CrawlStore
from .app import FETCH_QUEUES, direct_queue
from .context import Context
from .logs import Throttled
from .outage import REDIS_UNAVAILABLE
from .recorder import Final, crawl_finished, finalize, sweep_orphans
from .room import probe_output
from .settle import Decision, settle

log = logging.getLogger(__name__)

#: (crawl id, [(url, depth), ...], queue): one fetch message for URLs released together.
Publish = Callable[[str, list[tuple[str, int]], str], None]
PublishParse = Callable[[str, str, int], None]
#: Stages ("r" fetch, "q" parse, "v" render) whose broker queues hold no message right now.
IdleQueues = Callable[[], set[str]]

#: Messages a fetch process's direct queue may hold while another's is empty before its hosts'
#: URLs go to the shared queues instead: a process with a free thread takes a message at once,
#: so it is busy while another is not (a crawl of one host would use one process). When every
#: fetch process is busy, hosts stay where their connections are.
DIRECT_QUEUE_MAX = 2
#: Hosts in one release round, per fetch process, from which their URLs go to their hosts'
#: processes (fewer: the shared queues).
AFFINITY_MIN_HOSTS = 1
AFFINITY_WINDOW = 5.0
#: Seconds between two looks for lost fetch messages.
REAP_EVERY = 60.0
#: Seconds between two looks for URLs of dead workers and unwritten records (an HSCAN of
#: each running crawl's in-flight hash: a few hundred entries on a broad crawl).
RECLAIM_EVERY = 2.0


class Dispatcher:
    def __init__(
        self,
        context: Callable[[], Context],
        publish: Publish,
        settings: Settings,
        publish_parse: PublishParse,
        idle_queues: IdleQueues = lambda: {"r", "q", "v"},
        publish_render: PublishParse | None = None,
        join: Callable[[], None] | None = None,
    ):
        self._context = context
        self._publish = publish
        self._publish_parse = publish_parse
        self._publish_render = publish_render or publish_parse
        self._idle_queues = idle_queues
        #: Done once before the first round, in this thread (it waits out a Redis that is
        #: away or full like a round does, where the worker's start could not).
        self._join = join
        self.settings = settings
        self._stop = threading.Event()
        self._rates, self._rates_read = "", -math.inf
        self._ceilings: dict[str, float] = {}
        self._round = 0
        self.more = False
        self._thread: threading.Thread | None = None
        self._next_reclaim = time.monotonic() + RECLAIM_EVERY
        self._broker: redis.Redis | None = None
        #: Live fetch processes with a direct queue (host affinity), and their queues' lengths.
        self._holders: list[str] = []
        self._direct: dict[str, int] = {}
        #: crawl id -> host -> when this dispatcher last released one of its URLs (monotonic)
        self._recent_hosts: dict[str, dict[str, float]] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crawler-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        every = min(REAP_EVERY, self.settings.visibility_timeout)
        next_reap = time.monotonic() + every
        errors, pause = Throttled(log, "dispatcher tick"), self.settings.dispatch_interval
        while not self._stop.is_set():
            try:
                if self._join is not None:
                    self._join()
                    self._join = None
                self.tick()
                busy = self.more
                if time.monotonic() > self._next_reclaim:
                    self._next_reclaim = time.monotonic() + RECLAIM_EVERY
                    self.reclaim()
                if time.monotonic() > next_reap:
                    next_reap = time.monotonic() + every
                    self.reap()
                errors.ok()
                pause = self.settings.dispatch_interval
            except Exception as exc:  # a Redis hiccup must not kill the dispatcher
                errors.failed(exc, expected=isinstance(exc, REDIS_UNAVAILABLE))
                busy, pause = False, min(max(pause * 2, 0.1), 2.0)  # back off while it lasts
                # Heartbeats could not be written either: give workers time to beat again
                # before anything counts as dead.
                wait = self.settings.worker_dead_seconds
                self._next_reclaim = max(self._next_reclaim, time.monotonic() + wait)
            if not busy:
                self._stop.wait(pause)

    def reap(self) -> int:
        """Publish again fetches whose message never reached a worker. Rare (a dispatcher
        killed between release.lua and the publish); a duplicate is harmless because every
        task is idempotent, so the threshold only has to exceed any normal queueing delay."""
        ctx = self._context()
        older_than = self.settings.visibility_timeout + self.settings.total_timeout
        n = 0
        for crawl_id in stores.running(ctx.r):
            store = ctx.store(crawl_id)
            if store is None:
                continue
            for url, depth in store.ledger.stale_releases(older_than):
                log.warning("re-publishing lost fetch of %s (crawl %s)", url, store.id)
                tier = store.opts.tier(depth, self.settings.medium_max_depth)
                self._publish(store.id, [(url, depth)], tier)
                n += 1
        return n

    def reclaim(self) -> int:
        """Take back URLs held by workers that stopped beating or whose message was lost;
        write records dead processes left."""
        ctx = self._context()
        s = self.settings
        living = workers.alive(ctx.client, ctx.keys, s.worker_dead_seconds)
        idle = self._idle_queues()
        n = 0
        for crawl_id in stores.running(ctx.r):
            store = ctx.store(crawl_id)
            if store is None:
                continue
            for url, entry, value in store.ledger.stuck(living, s.lost_message_seconds, idle):
                n += self._take_back(ctx, store, url, entry, value)
            sweep_orphans(ctx, store)
            probe_output(ctx, store)  # a full disk: room found by a write, not by a fetch
            store.series.sample()  # one process per interval cluster-wide (series.py)
            # A process that died between finishing the last URL and CrawlStatus.finishing.
            finishing = store.status.steering() is Steering.FINISHING
            if not finishing and store.status.finishing():
                crawl_finished(ctx, store)
        return n

    def _take_back(
        self, ctx: Context, store: CrawlStore, url: str, entry: Inflight, value: str
    ) -> int:
        """A URL whose worker or message was lost: final after ``max_retries``, else back to
        the frontier (a fetch; its lease returned as an error) or its parse published again."""
        fetching = entry.stage in ("r", "s")
        lease = store.politeness.lease(url, entry.domain) if fetching else None
        lost = WorkerLost(f"{entry.stage}:{entry.worker}: its worker or message was lost")
        if store.ledger.count_attempt(url) > store.opts.max_retries:
            failed = Decision.record(Final.failed(url, entry.depth, lost), LeaseEnd.ERROR)
            settle(ctx, store, url, entry.depth, failed, lease)
            return 1
        if not store.ledger.reclaim(url, entry, value):
            return 0  # moved on meanwhile: the lease is not ours to return
        log.warning("crawl %s: took %.300s back (%s)", store.id, url, lost)
        if lease is not None:  # its lease, or the host waits for the lease to expire
            lease.release(LeaseEnd.ERROR)
        elif entry.stage in ("v", "w"):  # its body waits for a render
            store.ledger.mark_render_queued(url)
            self._publish_render(store.id, url, entry.depth)
        else:
            store.ledger.mark_parse_queued(url)
            self._publish_parse(store.id, url, entry.depth)
        return 1

    def tick(self) -> bool:
        """One release round over all running crawls; True if anything was released. Sets
        ``more`` if a release call stopped at its limit (more may be ready now); otherwise the
        next round waits ``dispatch_interval``: everything ready was released, or the budget
        is spent, and a round at once would release one or two URLs (each one message, not
        one message of several) for the cost of a full round."""
        ctx, s = self._context(), self.settings
        busy = self.more = False
        rates = self._cluster_rates(ctx)  # first: the direct queues _survey counts
        running, budget = self._survey(ctx)
        for crawl_id in running:
            store = ctx.store(crawl_id)
            if store is None or budget == 0:
                continue
            state = store.status.steering()
            if state is Steering.FINISHING:
                self._finish_abandoned(ctx, store)
                continue
            parts = len(store.ck.parts)
            self._round += 1
            for i in range(parts):  # a different partition first each round: none starves
                part = (self._round + i) % parts
                if budget == 0:
                    break
                released = self._release(ctx, store, part, budget, rates, state)
                if budget is not None and state is not Steering.CANCELLED:
                    budget = max(0, budget - released)
                busy = busy or released > 0
                limit = CANCEL_DRAIN if state is Steering.CANCELLED else s.dispatch_batch
                self.more = self.more or released >= limit
        return busy

    def _release(
        self,
        ctx: Context,
        store: CrawlStore,
        part: int,
        budget: int | None,
        rates: str,
        state: Steering,
    ) -> int:
        """release.lua on one partition, and the follow-up of what it handed out."""
        s = self.settings
        release = store.frontier.release(
            part,
            s.dispatch_batch,
            s.lease_seconds,
            ctx.worker_id,
            budget=budget,
            cluster_rates=rates,
            state=state,
            holders=tuple(self._holders),
        )
        entries = release.entries
        if not release.cancelled and self._ceilings:
            entries = self._within_ceilings(ctx, store, entries)
        queues: dict[str, list[tuple[str, int]]] = {}
        # Affinity pays where hosts are many and each has few pages (a broad crawl: a new
        # connection per host and process). A crawl of a few hosts uses the shared queues:
        # one host's pages on one process would leave the others idle (a single-site crawl:
        # bench/crawl.py 389 -> 266 pages/s with affinity).
        affine = self._many_hosts(store.id, {e[0] for e in entries})
        for domain, depth, url in entries:
            if release.cancelled:  # drained unfetched: recorded as cancelled here
                finalize(ctx, store, Final.cancelled(url, depth))
            else:
                tier = store.opts.tier(depth, s.medium_max_depth)
                queue = self._route(domain, tier) if affine else tier
                queues.setdefault(queue, []).append((url, depth))
        size = s.urls_per_message
        for queue, items in queues.items():  # released together, so sent together
            for i in range(0, len(items), size):
                self._publish(store.id, items[i : i + size], queue)
        return len(release.entries)

    def _many_hosts(self, crawl_id: str, domains: set[str]) -> bool:
        """Did this dispatcher release AFFINITY_MIN_HOSTS hosts per process lately?"""
        now = time.monotonic()
        seen = self._recent_hosts.setdefault(crawl_id, {})
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

    def _affinity(self, ctx: Context) -> None:
        """Which fetch processes hold hosts now (asked with the rates, once a second). A dead
        one's direct queue is deleted: its URLs are marked as its own, so reclaim takes them
        back to the frontier, and its messages would only fetch them twice."""
        live, dead = workers.affine(ctx.client, ctx.keys, self.settings.worker_dead_seconds)
        broker = self._broker_client(ctx)
        # Also the queues of processes this dispatcher routed to until now and that another
        # dispatcher has already seen die: it may have published to them since their deletion.
        gone = set(dead) | (set(self._holders) - set(live))
        for worker in sorted(gone):
            if broker is not None:
                broker.delete(direct_queue(worker))
        for worker in dead:
            workers.leave(ctx.client, ctx.keys, worker)
        self._holders = live
        self._direct = {w: n for w, n in self._direct.items() if w in live}

    def _cluster_rates(self, ctx: Context) -> str:
        """`crawler set-rate` overrides and `crawler set-ceiling` ceilings, read at most once a
        second (they change rarely)."""
        now = time.monotonic()
        if now - self._rates_read >= 1.0:
            self._rates, self._rates_read = cluster_rates(ctx.client, ctx.keys), now
            self._ceilings = ceilings.read(ctx.client, ctx.keys)
            self._affinity(ctx)
        return self._rates

    def _within_ceilings(
        self, ctx: Context, store: CrawlStore, entries: list[tuple[str, int, str]]
    ) -> list[tuple[str, int, str]]:
        """The released entries a host's shared ceiling lets go now; the others go back to
        the frontier (due when the ceiling allows) and their crawl's bucket is refunded."""
        by_domain: dict[str, list[tuple[str, int, str]]] = {}
        for entry in entries:
            by_domain.setdefault(entry[0], []).append(entry)
        kept: list[tuple[str, int, str]] = []
        shared = ceilings.Ceilings(ctx.client, ctx.keys, ctx.r.scripts)
        for domain, some in by_domain.items():
            rate = self._ceilings.get(domain)
            if rate is None:
                kept += some
                continue
            charged = shared.charge(domain, rate, len(some))
            kept += some[: charged.allowed]
            for _d, depth, url in some[charged.allowed :]:
                store.politeness.refund(url, domain)
                store.ledger.requeue(domain, depth, url, charged.wait)
        return kept

    def _survey(self, ctx: Context) -> tuple[list[str], int | None]:
        """The running crawls, and how many URLs to release now: while the broker's fetch
        queues hold messages, every pool slot is taken (a free slot takes a message at once),
        and a host released now would wait behind them; so release only up to
        ``dispatch_queue_max`` waiting messages (of up to ``fetch_batch`` URLs each).
        None (no cap) when the broker is not a Redis this process can read. Nothing while
        Redis has no room for the links of what would be fetched (room.py).
        One round trip when the broker is the crawl state's Redis (the default)."""
        if ctx.room.full():
            return [], 0
        limit = self.settings.dispatch_queue_max
        broker = self._broker_client(ctx)
        if limit <= 0 or broker is None:
            return stores.running(ctx.r), None
        pipe = broker.pipeline(transaction=False)
        holders = list(self._holders)
        for queue in (*FETCH_QUEUES, *map(direct_queue, holders)):
            pipe.llen(queue)
        shared = broker is ctx.client
        if shared:  # stores.running's and the fetch processes' SMEMBERS, in this round trip
            pipe.smembers(ctx.keys.running)
            pipe.smembers(ctx.keys.fetchers)
        got = pipe.execute()
        running = [m.decode() for m in got[-2]] if shared else stores.running(ctx.r)
        if shared and not {m.decode() for m in got[-1]} <= set(holders):
            # A fetch process joined: hosts move to it now, not after their first pages
            # opened connections in the processes that held them for up to a second.
            self._rates_read = -math.inf
        lengths = got[: len(FETCH_QUEUES) + len(holders)]
        self._direct = dict(zip(holders, lengths[len(FETCH_QUEUES) :], strict=True))
        return running, max(0, limit - sum(lengths)) * self.settings.urls_per_message

    def _broker_client(self, ctx: Context) -> redis.Redis | None:
        url = self.settings.broker_url
        if url == self.settings.state_url:
            return ctx.client
        if self._broker is None and url.split("://", 1)[0] in ("redis", "rediss"):
            self._broker = redis.Redis.from_url(url)
        return self._broker

    def _finish_abandoned(self, ctx: Context, store: CrawlStore) -> None:
        """A crawl left finishing longer than a live finisher takes: its finisher died, or
        its output could not be written (tried again once the output pause is over)."""
        flags = store.status.flags()
        finished_at = float(flags.get("finished_at", 0) or 0)
        if float(flags.get("output_blocked_until", 0) or 0) > time.time():
            return
        # Its finisher gave up for the disk: again as soon as the pause is over.
        waited_for_output = "output_problem" in flags
        if waited_for_output or (
            finished_at and time.time() - finished_at > self.settings.orphan_record_seconds
        ):
            crawl_finished(ctx, store)
