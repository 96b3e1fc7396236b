"""Every Redis key the crawler uses, built in one place.

Every key of one crawl carries the crawl id as a Redis Cluster hash tag (``{C}``): they all
map to one hash slot, so each Lua script's keys are on one node, and different crawls spread
over the cluster's masters. Keys that are not a crawl's have no tag (each lives wherever its
name hashes) and no script touches them beside a crawl's keys.

Layout (``P`` is the prefix setting, default ``crawler``; ``C`` a crawl id; ``D`` a domain;
``H`` a URL digest; ``N`` a number; ``S`` a schedule name). Formats of values shared with the
Lua scripts are in ``formats.py``. ``tests/test_formats.py`` fails on any key a crawl writes that
this table does not describe, or whose type differs::

    P:crawls                 zset   crawl ids by start time (``crawler list``)
    P:running                set    crawl ids the dispatchers release work for
    P:rates                  hash   cluster-wide rates set with `crawler set-rate`
    P:workers                hash   worker process id -> last heartbeat (unix seconds)
    P:schedules              hash   recrawl schedules
    P:redbeat:*              -      celery beat's schedule entries and lock (RedBeat)
    P:robots:ORIGIN          string robots.txt cache, shared by crawls
    P:sched:S:validators     hash   url -> zlib(JSON) validators of the last runs of schedule S
    P:sched:S:runs           zset   crawl ids of schedule S by start time
    P:{C}:config               string crawl options, JSON (immutable after start)
    P:{C}:state                hash   status, started_at, finished_at, paused, cancelled,
                                    final_status, summary_path, gone_counted,
                                    on_finished_sent
    P:{C}:stats                hash   counters (formats.Counter and the formats families)
    P:{C}:outstanding          string URLs admitted and not yet in a final state (completion)
    P:{C}:bloom:N              string Bloom filter shard N
    P:{C}:q:D                  list   pending frontier entries of one domain (formats.entry)
    P:{C}:ready                zset   domains with pending work, scored by when they may go next
    P:{C}:dom:D                hash   politeness state of a domain: tat, slow, not_before, delay,
                                    iv (interval of the last release), own (owner's rate),
                                    fails, down_since, dead (circuit breaker, done.lua)
    P:{C}:rates                hash   the crawl owner's rate overrides, domain -> req/s or "inf"
    P:{C}:lease:D              zset   in-flight lease tokens of a domain, scored by expiry
    P:{C}:inflight             hash   url -> formats.Inflight, every released, unfinished URL
    P:{C}:retry                zset   formats.retry_member waiting for a retry, scored by due time
    P:{C}:attempts             hash   url -> failed attempts so far (only URLs that failed once)
    P:{C}:body:H               hash   fetched response waiting for its parse task: meta, body
    P:{C}:failed               hash   url -> dead-letter record, JSON
    P:{C}:unwritten            hash   url -> formats.Unwritten: final, record not yet on disk
    P:{C}:finisher             string lock (SET NX EX) of the process running the end of the crawl
    P:{C}:hostpages            hash   domain -> URLs admitted (``max_pages_per_host``)
    P:{C}:redirects            hash   url -> JSON list of redirect targets it claimed (marked seen)
    P:{C}:persec               hash   unix second -> URLs finished (recent pages/s)
    P:{C}:sitemaps             set    URLs admitted as sitemap files (``sitemaps=True`` crawls)
    P:{C}:smo:ORIGIN           string set (NX) once this crawl admitted ORIGIN's robots.txt sitemaps
    P:{C}:simhash              zset   page fingerprints by band, "band:hex16:fp:url" at score 0
                                    (near_duplicates crawls; state/neardup.py)
    P:{C}:events               -      pub/sub channel of crawl events (not a key)
"""

from __future__ import annotations

import hashlib


class Keys:
    """Key names for one prefix; ``crawl(cid)`` gives the names of one crawl."""

    def __init__(self, prefix: str = "crawler") -> None:
        self.prefix = prefix
        self.crawls = f"{prefix}:crawls"
        self.running = f"{prefix}:running"
        self.schedules = f"{prefix}:schedules"
        self.rates = f"{prefix}:rates"
        self.workers = f"{prefix}:workers"

    def crawl(self, crawl_id: str) -> CrawlKeys:
        return CrawlKeys(f"{self.prefix}:{{{crawl_id}}}", self.rates)

    def robots(self, origin: str) -> str:
        return f"{self.prefix}:robots:{origin}"

    def schedule_validators(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:validators"

    def schedule_runs(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:runs"


class CrawlKeys:
    def __init__(self, base: str, cluster_rates: str) -> None:
        self.base = base
        #: ``P:rates``, which release.lua reads beside the crawl's own keys.
        self.cluster_rates = cluster_rates
        self.config = f"{base}:config"
        self.state = f"{base}:state"
        self.stats = f"{base}:stats"
        self.outstanding = f"{base}:outstanding"
        self.ready = f"{base}:ready"
        self.rates = f"{base}:rates"
        self.domain_prefix = f"{base}:dom:"
        self.inflight = f"{base}:inflight"
        self.failed = f"{base}:failed"
        self.unwritten = f"{base}:unwritten"
        self.finisher = f"{base}:finisher"
        self.host_pages = f"{base}:hostpages"
        self.redirects = f"{base}:redirects"
        self.retry = f"{base}:retry"
        self.attempts = f"{base}:attempts"
        self.persec = f"{base}:persec"
        self.events = f"{base}:events"
        self.queue_prefix = f"{base}:q:"
        self.lease_prefix = f"{base}:lease:"
        self.sitemaps = f"{base}:sitemaps"
        self.simhash = f"{base}:simhash"

    def bloom(self, shard: int) -> str:
        return f"{self.base}:bloom:{shard}"

    def queue(self, domain: str) -> str:
        return self.queue_prefix + domain

    def domain(self, domain: str) -> str:
        return self.domain_prefix + domain

    def lease(self, domain: str) -> str:
        return self.lease_prefix + domain

    def body(self, url: str) -> str:
        return f"{self.base}:body:{url_digest(url)}"

    def sitemap_origin(self, origin: str) -> str:
        """Marker (SET NX): this crawl has admitted the Sitemap: lines of ``origin``."""
        return f"{self.base}:smo:{origin}"


def url_digest(url: str) -> str:
    return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
