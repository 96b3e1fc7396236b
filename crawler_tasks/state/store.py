"""One crawl's Redis side, as one object: its options and every component built on them.

Both the shell's :class:`~crawler_tasks.surface.crawl.Crawl` handle and the worker's
per-process context hold a :class:`CrawlStore` per crawl instead of building frontiers,
ledgers and filters of their own::

    store.opts         CrawlOptions (immutable after start)
    store.ledger       per-URL completion accounting, in flight, retries (ledger.py)
    store.unwritten    final records not yet on disk, their claims and commits (unwritten.py)
    store.dead_letters the records of URLs that failed for good, their replay (dead_letters.py)
    store.lifecycle    status and steering: pause, cancel, output faults, finishing (status.py)
    store.finisher     the finisher's lock, the crawl's expiry and final status (finisher.py)
    store.stats        counters, rates, and the figures users read: Progress, Summary (stats.py)
    store.frontier     per-domain queues, admit.lua / release.lua (frontier.py)
    store.admission    scope, depth, per-host budgets, redirect claims (admission.py); its
                       writes (and the frontier's admit.lua) go through the client the store
                       was built with for admission (a worker's waits for room: room.py)
    store.bloom        the crawl's dedupe filter (bloom.py)
    store.politeness   per-domain buckets and leases (politeness.py)
    store.bodies       fetched bodies waiting for their parse (bodies.py)
    store.sitemaps     which URLs are sitemap files (sitemaps.py)
    store.recrawl      validators of the previous run, for scheduled crawls (validators.py)
    store.series       its counters sampled over time, for rates over time (series.py)
"""

from __future__ import annotations

import dataclasses
import itertools
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import ConfigError, shown
from ..settings import Settings
from ..web.seeds import check_seeds
from . import chunk_store, connection, events, objects
from .admission import Admission
from .bloom import BloomFilter, KnownURLs
from .bodies import BodyStash
from .dead_letters import DeadLetters
from .finisher import Finisher
from .formats import Status
from .frontier import Frontier
from .keys import CrawlKeys, Keys
from .ledger import Ledger
from .options import CrawlOptions
from .pacing import Pacing
from .politeness import Politeness
from .render_config import RenderConfig
from .render_plan import RenderPlan
from .scripts import Scripts
from .series import Series
from .sitemaps import SitemapMarks
from .stats import Stats
from .status import CrawlLifecycle
from .unwritten import UnwrittenRecords
from .validators import Recrawl, Validators


@dataclass(frozen=True)
class RedisHandle:
    """What every store of one process shares: the client, key names, registered scripts."""

    client: redis.Redis
    keys: Keys
    scripts: Scripts

    @classmethod
    def connect(cls, client: redis.Redis, prefix: str) -> RedisHandle:
        return cls(client, Keys(prefix), Scripts(client))


@dataclass(frozen=True)
class Process:
    """Process settings the components need (not part of the crawl: they change no output)."""

    max_crawl_delay: float
    body_ttl: int

    @classmethod
    def of(cls, settings: Settings) -> Process:
        return cls(settings.max_crawl_delay, settings.body_ttl)


class CrawlStore:
    def __init__(
        self,
        r: RedisHandle,
        opts: CrawlOptions,
        process: Process | None = None,
        known: KnownURLs | None = None,
        admission_client: redis.Redis | None = None,
    ) -> None:
        """``admission_client``: the client admission writes through (a worker's waits for
        room while Redis is full, worker/runtime/room.py); the store's own client by default."""
        # Without a process's settings, their defaults (declared once, in Settings).
        process = process or Process.of(Settings())
        self.r = r
        self.opts = opts
        self.id = opts.crawl_id
        self.client = r.client
        self.ck: CrawlKeys = r.keys.crawl(
            opts.crawl_id, opts.partitions or 1, opts.domain_key, opts.partition_tags
        )
        self.ledger = Ledger(r.client, self.ck, opts.crawl_id, r.scripts)
        self.unwritten = UnwrittenRecords(r.client, self.ck, r.scripts)
        self.dead_letters = DeadLetters(r.client, self.ck)
        self.lifecycle = CrawlLifecycle(r.client, r.keys, self.ck, opts.crawl_id, r.scripts)
        self.finisher = Finisher(r.client, r.keys, self.ck, opts.crawl_id)
        self.stats = Stats(r.client, self.ck, opts.crawl_id, self.lifecycle, opts.max_pages)
        admits = admission_client or r.client
        self.bloom = BloomFilter(admits, self.ck, opts.bloom, r.scripts)
        self.frontier = Frontier(r.client, self.ck, opts, r.scripts, known, admits)
        self.admission = Admission(admits, self.ck, opts, self.frontier, self.bloom)
        self.politeness = Politeness(
            r.client,
            self.ck,
            r.scripts,
            process.max_crawl_delay,
            opts.max_host_outage,
            self.frontier.rates,
            Pacing.of(opts, len(self.ck.parts)),
        )
        self.bodies = BodyStash(r.client, self.ck, process.body_ttl)
        self.render_plan = RenderPlan(r.client, self.ck, r.scripts)
        #: The crawl's render limits, as every render worker applies them.
        self.render_config = RenderConfig.from_options(opts)
        self.sitemaps = SitemapMarks(r.client, self.ck)
        self.series = Series(r.client, self.ck, self.stats, r.scripts)
        self.recrawl: Recrawl | None = None
        if opts.schedule:
            bounds = (opts.min_interval, opts.max_interval) if opts.adaptive else None
            validators = Validators(r.client, r.keys, opts.schedule)
            self.recrawl = Recrawl(validators, opts.crawl_id, opts.started_at, bounds)

    def __repr__(self) -> str:
        return f"<CrawlStore {self.id}>"

    def domain_of(self, url: str) -> str:
        return self.frontier.domain_of(url)

    def set_host_rate(self, host: str, rate: float | None) -> None:
        """This crawl's requests/s for ``host`` from now on, cluster-wide (None: back to
        its ``rates`` option or the default; state/crawl_rates.py)."""
        self.frontier.rates.set(host, rate)

    def record_action(self, name: str, by: str, **data: Any) -> dict[str, Any]:
        """An operator's action, kept in the crawl's action log and published (events.py)."""
        return events.action(self.client, self.ck, self.r.scripts, self.id, name, by=by, **data)

    @staticmethod
    def read_options(r: RedisHandle, crawl_id: str) -> CrawlOptions | None:
        """The crawl's options; None if it expired. ConfigError, one line naming the crawl
        and ``crawler forget``, for options this version cannot take (an older version's, a
        number past its ceiling, bad JSON): every command reading crawls goes through here."""
        raw = r.client.get(r.keys.crawl(crawl_id).config)
        if raw is None:
            return None
        try:
            return CrawlOptions.from_json(raw)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            why = " ".join(str(exc).split())[:200]
            raise ConfigError(
                f"crawl {crawl_id} cannot be read ({type(exc).__name__}: {why}); "
                f"`crawler forget {crawl_id}` removes it"
            ) from None

    @classmethod
    def create(
        cls,
        r: RedisHandle,
        opts: CrawlOptions,
        process: Process | None = None,
        more_seeds: Iterable[str] = (),
    ) -> CrawlStore:
        """Register a new crawl (options, state, listings) and admit its seeds at depth 0:
        ``opts.seeds``, then ``more_seeds`` (normalised; a seeds file) in batches."""
        ck = r.keys.crawl(opts.crawl_id)
        if not r.client.set(ck.config, opts.to_json(), nx=True):
            raise ConfigError(f"crawl {shown(opts.crawl_id)} exists already")
        # Not a transaction: the listings live outside the crawl's hash slot (Redis Cluster);
        # the config written above (NX) is what makes the crawl exist.
        pipe = r.client.pipeline(transaction=False)
        pipe.hset(
            ck.state, mapping={"status": Status.RUNNING.value, "started_at": repr(opts.started_at)}
        )
        pipe.zadd(r.keys.crawls, {opts.crawl_id: opts.started_at})
        if opts.schedule:
            pipe.zadd(r.keys.schedule_runs(opts.schedule), {opts.crawl_id: opts.started_at})
        pipe.execute()
        store = cls(r, opts, process)
        store.frontier.admit((u, 0) for u in opts.seeds)
        seeds = iter(more_seeds)
        while batch := list(itertools.islice(seeds, SEED_BATCH)):
            store.frontier.admit((u, 0) for u in batch)
        store.series.sample(now=opts.started_at, force=True)  # the chart's first point
        # Listed for the dispatchers only once its seeds are counted: before, the crawl would
        # look drained to CrawlLifecycle.finishing.
        r.client.sadd(r.keys.running, opts.crawl_id)
        return store


#: Seeds admitted per admit.lua call beyond the crawl's own (a seeds file's).
SEED_BATCH = 10_000


def new_crawl_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def plan(
    settings: Settings | None,
    seeds: Iterable[str] | str,
    *,
    crawl_id: str | None = None,
    output: str = "",
    **options: Any,
) -> CrawlOptions:
    """A new crawl's options, seeds and options checked (the one check of each command:
    start_crawl, ``crawler crawl``, a schedule added or run); nothing is written. Without
    ``settings``, the defaults of options built without them."""
    urls = check_seeds(seeds, bool(options.get("allow_private_networks", False)))
    agent = options.get("user_agent")
    if isinstance(agent, str) and not agent.strip():
        # Given, and empty: the default was sent instead, without a word.
        raise ConfigError("user_agent is empty: leave it out for the default (CRAWLER_USER_AGENT)")
    if objects.looks_like_url(output):  # s3://, or refused (gs://, a typo)
        output = objects.place(output)
    opts = CrawlOptions.build(
        crawl_id or new_crawl_id(), tuple(urls), settings, 0.0, output=output, **options
    )
    return chunk_store.placed(opts, settings)  # where every worker finds the others' chunks


def start(
    r: RedisHandle,
    opts: CrawlOptions,
    process: Process | None = None,
    more_seeds: Iterable[str] = (),
    at: float | None = None,
) -> CrawlStore:
    """Register a crawl planned by :func:`plan` and admit its seeds: its partitions placed
    (``partitions`` 0: automatic) and its start time stamped now, or ``at`` (a simulated
    clock: the time a schedule's run counts as, tests/support/recrawl_site.py,
    bench/adaptive.py)."""
    partitions = opts.partitions or connection.default_partitions(r.client)
    opts = dataclasses.replace(
        opts,
        partitions=partitions,
        partition_tags=connection.placed_tags(r.client, opts.crawl_id, partitions),
        started_at=time.time() if at is None else at,
    )
    return CrawlStore.create(r, opts, process, more_seeds)
