"""Every Redis key the crawler uses, built in one place.

Layout (``P`` is the prefix setting, default ``crawler``; ``C`` a crawl id; ``D`` a domain)::

    P:crawls                 zset   crawl ids by start time (``crawler list``)
    P:running                set    crawl ids the dispatchers release work for
    P:C:config               string crawl options, JSON (immutable after start)
    P:C:state                hash   status, started_at, finished_at, paused, cancelled
    P:C:stats                hash   counters: discovered, admitted, fetched, failed:*, status:* ...
    P:C:outstanding          string URLs admitted and not yet in a final state (completion)
    P:C:bloom:N              string Bloom filter shard N
    P:C:q:D                  list   pending frontier entries of one domain ("depth|url")
    P:C:ready                zset   domains with pending work, scored by when they may go next
    P:C:dom:D                hash   politeness state of a domain: tat, slow, not_before, delay,
                                    iv (interval of the last release), own (owner's rate)
    P:C:rates                hash   the crawl owner's rate overrides, domain -> req/s or "inf"
    P:C:lease:D              zset   in-flight lease tokens of a domain, scored by expiry
    P:C:inflight             hash   url -> "domain|released at" for every released, unfinished URL
    P:C:retry                zset   "domain<TAB>depth|url" waiting for a retry, scored by due time
    P:C:attempts             hash   url -> failed attempts so far (only URLs that failed once)
    P:C:body:H               string fetched body waiting for its parse task
    P:C:failed               hash   url -> dead-letter record, JSON
    P:C:hostpages            hash   domain -> URLs admitted (``max_pages_per_host``)
    P:C:redirects            hash   url -> JSON list of redirect targets it claimed (marked seen)
    P:C:persec               hash   unix second -> URLs finished (recent pages/s)
    P:C:sitemaps             set    URLs admitted as sitemap files (``sitemaps=True`` crawls)
    P:C:smo:ORIGIN           string set (NX) once this crawl admitted ORIGIN's robots.txt sitemaps
    P:C:events               pubsub channel of crawl events
    P:robots:ORIGIN          string robots.txt cache, shared by crawls
    P:rates                  hash   cluster-wide rates set with `crawler set-rate`
    P:schedules              hash   recrawl schedules
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

    def crawl(self, crawl_id: str) -> CrawlKeys:
        return CrawlKeys(f"{self.prefix}:{crawl_id}")

    def robots(self, origin: str) -> str:
        return f"{self.prefix}:robots:{origin}"

    def schedule_validators(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:validators"

    def schedule_runs(self, name: str) -> str:
        return f"{self.prefix}:sched:{name}:runs"


class CrawlKeys:
    def __init__(self, base: str) -> None:
        self.base = base
        self.config = f"{base}:config"
        self.state = f"{base}:state"
        self.stats = f"{base}:stats"
        self.outstanding = f"{base}:outstanding"
        self.ready = f"{base}:ready"
        self.rates = f"{base}:rates"
        self.domain_prefix = f"{base}:dom:"
        self.inflight = f"{base}:inflight"
        self.failed = f"{base}:failed"
        self.host_pages = f"{base}:hostpages"
        self.redirects = f"{base}:redirects"
        self.retry = f"{base}:retry"
        self.attempts = f"{base}:attempts"
        self.persec = f"{base}:persec"
        self.events = f"{base}:events"
        self.queue_prefix = f"{base}:q:"
        self.lease_prefix = f"{base}:lease:"
        self.sitemaps = f"{base}:sitemaps"

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
