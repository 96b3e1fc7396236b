"""Every Redis key the crawler uses, built in one place.

A crawl's keys come in two kinds, each under a Redis Cluster hash tag so that every Lua script
and transaction touches one hash slot (what a cluster requires), while one big crawl still
spreads over all the cluster's masters:

* crawl-wide keys (options, status, finisher lock): tag ``{C}``;
* partition keys: the crawl's domains are split into ``partitions`` (``CrawlOptions``; 1 on a
  standalone Redis) by a hash of the domain, and everything about a domain and its URLs (its
  queue, politeness state and leases, the Bloom filter of its URLs, in-flight entries,
  counters, unwritten records) lives under the partition's tag ``{C/N}`` (on a cluster N is
  "n.k", with k chosen to put partition n on master n mod M). A URL's partition
  is its domain's, so admitting, releasing, fetching and finishing a URL each touch one
  partition; only completion looks at all of them (status.py, stats.py).

Keys that are not a crawl's have no tag (each lives wherever its name hashes) and no script
touches them beside a crawl's keys.

Layout (``P`` is the prefix setting, default ``crawler``; ``C`` a crawl id; ``D`` a domain;
``H`` a URL digest; ``N`` a number; ``S`` a schedule name; ``A`` a server address). Formats of
values shared with the Lua scripts are in ``formats.py``. ``tests/integration/test_formats.py``
fails on any key a crawl writes that this table does not describe, or whose type differs::

    P:crawls                 zset   crawl ids by start time (``crawler list``)
    P:running                set    crawl ids the dispatchers release work for
    P:rates                  hash   cluster-wide rates set with `crawler set-rate`
    P:ceilings               hash   host -> requests/s all crawls share (`crawler set-ceiling`)
    P:ceil:D                 string GCRA state (tat) of host D's shared ceiling (ceiling.lua)
    P:ceilg:D                string next send slot of host D's shared ceiling (ceiling_gate.lua)
    P:workers                hash   worker process id -> last heartbeat (unix seconds)
    P:fetchers               set    fetch worker processes with a direct queue (host affinity)
    P:leaving                set    those of them in a warm shutdown: routed nothing new, their
                                    queues kept until they hand them back (worker/dispatch/departure.py)
    P:held:<worker>          set    "crawl<TAB>url" of the fetch messages a live process holds
                                    (received, not yet begun), written with its heartbeat
    P:schedules              hash   recrawl schedules
    P:redbeat:*              -      celery beat's schedule entries and lock (RedBeat)
    P:robots:ORIGIN          string robots.txt cache, shared by crawls
    P:sched:S:validators     hash   url -> zlib(JSON) validators of the last runs of schedule S
    P:sched:S:runs           zset   crawl ids of schedule S by start time
    P:sched:S:captures       hash   H(url, 8 bytes) -> last full WARC capture (web/captures.py)
    P:sched:S:lastmod        hash   url -> "lastmod run": a sitemap's lastmod, the run that read it
    P:sched:S:lastmod_acc    hash   "host:checks" / "host:agreed" -> visits that checked lastmod
    P:{C}:config             string crawl options, JSON (immutable after start)
    P:{C}:state              hash   status, started_at, finished_at, paused, cancelled,
                                    final_status, error, output_problem,
                                    output_blocked_until, reserved, tls_error_why,
                                    robots_unreachable_why, output_given_up, summary_path, summary_host,
                                    gone_counted, on_finished_sent (read as one CrawlState:
                                    state/crawl_state.py)
    P:{C}:stats              hash   crawl-wide counters (sitemap files, recrawl changes); the
                                    rest are per partition, summed by stats.py
    P:{C}:finisher           string lock (SET NX EX) of the process running the end of the crawl
    P:{C}:store_mark         string "<token> <host>": the mark a directory chunk store holds
                                    (mark-<token>); a machine that cannot read it does not
                                    tend the crawl's tails (state/store_mark.py)
    P:{C}:smo:ORIGIN         string set (NX) once this crawl admitted ORIGIN's robots.txt sitemaps
    P:{C}:simhash            zset   page fingerprints by band, "band:hex16:fp:url" at score 0
                                    (near_duplicates crawls; state/neardup.py)
    P:{C}:series             list   samples of the crawl's counters, JSON, one per
                                    series.SAMPLE_EVERY s at most, the last SAMPLES_KEPT
                                    (pages/s and errors/s over time: state/series.py)
    P:{C}:sampled            string lock (SET NX PX) of the process taking this interval's sample
    P:{C}:render             hash   render=auto's plan, per host H: "H|mode", "H|pages",
                                    "H|renders"... (render_plan.lua; state/render_plan.py)
    P:{C}:render_told        set    8-byte digests of the URLs whose render verdict the plan has
                                    counted: a render told twice (redelivered) counts once
    P:{C}:actions            list   operators' actions (dashboard controls), JSON, the last
                                    ACTIONS_KEPT (state/events.py)
    P:{C}:rates              hash   host -> requests/s an operator set for this crawl only
                                    (the dashboard's "Set rate"; state/crawl_rates.py)
    P:{C}:segments           hash   staged segment file of an s3:// crawl -> formats.Segment
                                    "state|host|pid|at": written, not yet uploaded (state/segments.py)
    P:{C}:uploaded           hash   segment file -> its bytes, once its object is in the store
                                    (segment_uploaded.lua)
    P:{C}:places             hash   "host-pid" -> JSON {host, dir, pid}: where each process
                                    wrote a local-output crawl's files (state/output_places.py)
    P:{C}:events             -      pub/sub channel of crawl events (not a key)
    P:{C}:ended              -      pub/sub channel: the crawl's status turned final (not a key;
                                    the uploaders of its segments wake: worker/output/uploads.py)
    P:{C/N}:flow             hash   in (URLs admitted, replays included), out (URLs final), and
                                    copies of the crawl's cancelled flag (start.lua,
                                    release.lua) and paused flag (release.lua): completion and
                                    steering
    P:{C/N}:stats            hash   counters (formats.Counter and the formats families)
    P:{C/N}:bloom:N          string Bloom filter shard N of the partition's URLs
    P:{C/N}:q:D              list   pending frontier entries of one domain (formats.entry): its
                                    head, at most ``frontier_head`` admitted (state/tails.py)
    P:{C/N}:sp:D             list   domain D's spill buffer: entries admitted beyond its head,
                                    written as one chunk when ``frontier_chunk`` long
    P:{C/N}:ix:D             list   ids of domain D's chunks in the chunk store, the next to
                                    refill first (state/tails.py chunk_id)
    P:{C/N}:spilled          hash   domain -> URLs of the domain in chunks (not in Redis)
    P:{C/N}:flush            zset   domains with a non-empty spill buffer, scored by when it is
                                    due to be written out: 0 when it holds a chunk, else the
                                    time it began to fill (written after frontier_flush_seconds)
    P:{C/N}:low              set    domains whose head is low with chunks to refill it from
    P:{C/N}:ready            zset   domains with pending work, scored by when they may go next
    P:{C/N}:dom:D            hash   politeness state of a domain: tat, slow, not_before, delay,
                                    iv, sl (interval and burst slack of the last release),
                                    sg (its send gate, gate_lib.lua), own (owner's rate),
                                    fails, down_since, dead (circuit breaker, done.lua),
                                    ip, ip_until, ipx (its server address, state/pacing.py),
                                    at, lat, piv (AutoThrottle's delay, latency, floor)
    P:{C/N}:lease:D          zset   in-flight lease tokens of a domain, scored by expiry
    P:{C/N}:ip:A             hash   server address A's bucket: tat (``ip_rate``, release.lua),
                                    iv, sg (its send gate, gate_lib.lua)
    P:{C/N}:ipl:A            zset   URLs in flight to address A by expiry (``ip_concurrency``)
    P:{C/N}:ipw:A            set    domains waiting for a lease of address A (done.lua wakes them)
    P:{C/N}:inflight         hash   url -> formats.Inflight, every released, unfinished URL
    P:{C/N}:retry            zset   formats.retry_member waiting for a retry, scored by due time
    P:{C/N}:attempts         hash   url -> failed attempts so far (only URLs that failed once)
    P:{C/N}:takebacks        hash   url -> times taken back from a silent worker (not attempts)
    P:{C/N}:body:H           hash   fetched response waiting for its parse task: meta, body
    P:{C/N}:failed           hash   url -> dead-letter record, JSON
    P:{C/N}:unwritten        hash   url -> formats.Unwritten: final, record not yet on disk
    P:{C/N}:fenced           hash   url -> file and time of the last claim of its record
                                    (claim.lua); a frozen first writer undoes its copy
    P:{C/N}:archived         hash   kind + url digest -> id of its archived WARC record, or
                                    the reservation of its writer (formats.ArchiveSlot)
    P:{C/N}:hostpages        hash   domain -> URLs admitted (``max_pages_per_host``)
    P:{C/N}:redirects        hash   url -> JSON list of redirect targets it claimed (marked seen)
    P:{C/N}:persec           hash   unix second -> URLs finished (recent pages/s)
    P:{C/N}:sitemaps         set    URLs admitted as sitemap files (``sitemaps=True`` crawls)
"""

from __future__ import annotations

import hashlib

import mmh3

from ..web.urls import domain_key


class Keys:
    """Key names for one prefix; ``crawl(cid, ...)`` gives the names of one crawl."""

    def __init__(self, prefix: str = "crawler") -> None:
        self.prefix = prefix
        self.crawls = f"{prefix}:crawls"
        self.running = f"{prefix}:running"
        self.schedules = f"{prefix}:schedules"
        self.rates = f"{prefix}:rates"
        self.ceilings = f"{prefix}:ceilings"
        self.workers = f"{prefix}:workers"
        self.fetchers = f"{prefix}:fetchers"
        self.leaving = f"{prefix}:leaving"
        self._held = f"{prefix}:held:"

    def held(self, worker: str) -> str:
        """The fetch URLs ``worker`` has received and not begun (workers.Heartbeat)."""
        return self._held + worker

    def crawl(
        self,
        crawl_id: str,
        partitions: int = 1,
        domain_mode: str = "host",
        tags: tuple[str, ...] = (),
    ) -> CrawlKeys:
        """``partitions``, ``domain_mode`` and ``tags`` (partition_tags) are the crawl's
        options (``CrawlOptions``); the crawl-wide names do not depend on them."""
        return CrawlKeys(self.prefix, crawl_id, self.rates, partitions, domain_mode, tags)

    def segments(self, crawl_id: str) -> str:
        """A crawl's staged segments not yet uploaded (crawl-wide: ``CrawlKeys.base``'s tag)."""
        return f"{self.prefix}:{{{crawl_id}}}:segments"

    def uploaded(self, crawl_id: str) -> str:
        """A crawl's segments uploaded to its object store, with their sizes."""
        return f"{self.prefix}:{{{crawl_id}}}:uploaded"

    def robots(self, origin: str) -> str:
        return f"{self.prefix}:robots:{origin}"

    def ceiling(self, host: str) -> str:
        return f"{self.prefix}:ceil:{host}"

    def ceiling_gate(self, host: str) -> str:
        return f"{self.prefix}:ceilg:{host}"

    def schedule_validators(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:validators"

    def schedule_runs(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:runs"

    def schedule_captures(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:captures"

    def schedule_lastmods(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:lastmod"

    def schedule_lastmod_accuracy(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:lastmod_acc"


def partition_of(domain: str, partitions: int) -> int:
    """The partition of ``domain``: stable across processes and versions (murmur3)."""
    return 0 if partitions <= 1 else mmh3.hash(domain, signed=False) % partitions


class CrawlKeys:
    def __init__(
        self,
        prefix: str,
        crawl_id: str,
        cluster_rates: str,
        partitions: int,
        domain_mode: str,
        tags: tuple[str, ...] = (),
    ) -> None:
        self.base = base = f"{prefix}:{{{crawl_id}}}"
        #: Pattern matching the names of every key of the crawl, partitions included.
        self.patterns = (f"{base}:*", f"{prefix}:{{{crawl_id}/*}}:*")
        #: ``P:rates``, which the dispatcher reads for release.lua.
        self.cluster_rates = cluster_rates
        self.config = f"{base}:config"
        self.state = f"{base}:state"
        self.stats = f"{base}:stats"
        self.finisher = f"{base}:finisher"
        self.events = f"{base}:events"
        self.ended = f"{base}:ended"
        self.simhash = f"{base}:simhash"
        self.series = f"{base}:series"
        self.sampled = f"{base}:sampled"
        self.actions = f"{base}:actions"
        #: Host rates an operator set for this crawl while it runs (state/crawl_rates.py).
        self.host_rates = f"{base}:rates"
        #: ``render=auto``: per host, its decision and evidence (render_plan.lua).
        self.render_plan = f"{base}:render"
        #: URLs whose render the plan has been told of (render_plan.lua counts each once).
        self.render_told = f"{base}:render_told"
        #: Which mark a directory chunk store of the crawl holds (state/store_mark.py).
        self.store_mark = f"{base}:store_mark"
        #: Where each process wrote this crawl's files (local output: state/output_places.py).
        self.places = f"{base}:places"
        self.domain_mode = domain_mode
        tags = tags or tuple(str(n) for n in range(partitions))
        self.parts = [PartKeys(f"{prefix}:{{{crawl_id}/{tag}}}", n) for n, tag in enumerate(tags)]

    def sitemap_origin(self, origin: str) -> str:
        """Marker (SET NX): this crawl has admitted the Sitemap: lines of ``origin``."""
        return f"{self.base}:smo:{origin}"

    def for_domain(self, domain: str) -> PartKeys:
        return self.parts[partition_of(domain, len(self.parts))]

    def for_url(self, url: str) -> PartKeys:
        return self.for_domain(domain_key(url, self.domain_mode))

    # The per-domain and per-URL names, each in the right partition.
    def queue(self, domain: str) -> str:
        return self.for_domain(domain).queue(domain)

    def domain(self, domain: str) -> str:
        return self.for_domain(domain).domain(domain)

    def lease(self, domain: str) -> str:
        return self.for_domain(domain).lease(domain)

    def body(self, url: str) -> str:
        return self.for_url(url).body(url)


class PartKeys:
    """The names of one partition of a crawl (all in one hash slot)."""

    def __init__(self, base: str, index: int) -> None:
        self.base = base
        self.index = index
        self.flow = f"{base}:flow"
        self.stats = f"{base}:stats"
        self.ready = f"{base}:ready"
        self.inflight = f"{base}:inflight"
        self.retry = f"{base}:retry"
        self.attempts = f"{base}:attempts"
        self.takebacks = f"{base}:takebacks"
        self.failed = f"{base}:failed"
        self.unwritten = f"{base}:unwritten"
        self.fenced = f"{base}:fenced"
        self.archived = f"{base}:archived"
        self.host_pages = f"{base}:hostpages"
        self.redirects = f"{base}:redirects"
        self.persec = f"{base}:persec"
        self.sitemaps = f"{base}:sitemaps"
        self.queue_prefix = f"{base}:q:"
        #: A domain's tail (state/tails.py): its spill buffer and chunk index, in this slot.
        self.spill_prefix = f"{base}:sp:"
        self.index_prefix = f"{base}:ix:"
        self.spilled = f"{base}:spilled"
        self.flush = f"{base}:flush"
        self.low = f"{base}:low"
        self.lease_prefix = f"{base}:lease:"
        self.domain_prefix = f"{base}:dom:"
        #: Server address keys (state/pacing.py): ``address_prefix`` + ":A", "l:A", "w:A".
        self.address_prefix = f"{base}:ip"

    def bloom(self, shard: int) -> str:
        return f"{self.base}:bloom:{shard}"

    def queue(self, domain: str) -> str:
        return self.queue_prefix + domain

    def domain(self, domain: str) -> str:
        return self.domain_prefix + domain

    def spill(self, domain: str) -> str:
        return self.spill_prefix + domain

    def chunks(self, domain: str) -> str:
        return self.index_prefix + domain

    def lease(self, domain: str) -> str:
        return self.lease_prefix + domain

    def body(self, url: str) -> str:
        return f"{self.base}:body:{url_digest(url)}"


def url_digest(url: str) -> str:
    return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
