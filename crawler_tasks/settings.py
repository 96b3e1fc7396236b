"""Every setting of the crawler, with its unit and default, in one place.

Each field can be overridden by an environment variable named ``CRAWLER_`` + the field name in
upper case (``CRAWLER_BROKER_URL``, ``CRAWLER_DEFAULT_RATE``...). Values are read when
:func:`load` is called, never at import time, so a worker, the CLI and the tests all see the
environment they were started with, whatever their working directory. A field's declaration
below is its only one: its name, unit (in the comment), default, range (:func:`limited`) and
variable (derived from the name). How variables are read and checked is environment.py's;
ranges and the rule that checks them are limits.py's; hiding secrets is redaction.py's.

Two kinds of fields. Process settings (connections, pools, timeouts, paths) are read by each
process from its own environment. *Crawl defaults* (marked "Crawl default") are read only by
the process that starts a crawl, into the crawl's ``CrawlOptions``: a running crawl keeps the
values it started with, whichever host runs its tasks. Their value is declared here only; the
option that takes it names the field (``rate: float = setting("default_rate")`` in
state/options.py), and tests/unit/test_options.py checks every such pair.

Secrets (Redis passwords) come only from the environment; they are never written to Redis, to
task arguments, or to logs (see :func:`redact`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields
from typing import Any

from .environment import ENV_PREFIX, check_settings, read_settings
from .limits import DAY, INFINITE_OK, limited, limits_of, number, range_problem
from .redaction import redact, unescaped_userinfo

# The names other modules, tests and users import from here, where they used to be defined.
__all__ = [
    "DAY",
    "ENV_PREFIX",
    "INFINITE_OK",
    "LIMITS",
    "Settings",
    "limited",
    "load",
    "number",
    "range_problem",
    "redact",
    "unescaped_userinfo",
]


@dataclass(frozen=True)
class Settings:
    # --- connections -------------------------------------------------------------------------
    #: Celery broker and crawl-state Redis (``redis://``, ``rediss://`` or ``unix://``).
    broker_url: str = "redis://localhost:6379/0"
    #: Redis holding crawl state; empty means the broker's URL.
    redis_url: str = ""
    #: Prefix of every Redis key this project writes (see ``keys.py``).
    key_prefix: str = "crawler"
    #: Seconds a delivered but unacknowledged task waits before Redis redelivers it. Must exceed
    #: the longest task (fetch deadline) and every retry countdown.
    visibility_timeout: int = limited(600, 1, 7 * DAY)
    #: Seconds a running task waits, retrying, for Redis to come back (restart, failover) or to
    #: accept writes again (``maxmemory``) before it gives up and fails.
    redis_outage_wait: float = limited(600.0, 0, DAY)
    #: Seconds any Redis call (crawl state or broker) waits for an answer, and to connect,
    #: before it fails as Redis being away: a connection that stops answering without being
    #: closed (a silent partition, a frozen server) ends in a timeout that is ridden out like
    #: an outage, never in a thread blocked for ever. Above the slowest command the crawler
    #: sends (a Lua script over one batch: milliseconds).
    redis_timeout: float = limited(10.0, 0.1, 3600)
    #: Fraction of Redis's ``maxmemory`` (policy ``noeviction``) from which workers admit no new
    #: URLs: pages wait for room and no fetch is released, while the rest of the crawl (and
    #: the broker, on the same Redis) keeps the last part. 1 = only once Redis refuses writes.
    #: ``crawler status`` reports "admission paused" from the same fraction.
    admission_memory_fraction: float = limited(0.9, 0.05, 1)
    #: Seconds a fetched page waits for room to admit its links before its URL goes back to the
    #: frontier (fetched again once there is room, no retry spent). Below
    #: ``visibility_timeout``: the broker must not hand a waiting task to another worker.
    admission_wait: float = limited(120.0, 0.1, DAY)

    # --- HTTP ----------------------------------------------------------------------------------
    #: Crawl default. User-agent header sent with every request.
    user_agent: str = "crawler-tasks/0.1 (+https://github.com/crawler-tasks/crawler-tasks)"
    #: Crawl default. Product token matched against robots.txt ``User-agent:`` lines.
    robots_agent: str = "crawler-tasks"
    #: Path of a PEM file of extra certificate authorities (an intranet's or a test site's
    #: private CA), trusted for pages and robots.txt alike IN ADDITION to the default store
    #: (certifi's public CAs). Empty (the default) = the default store only. Read when a
    #: process starts: a missing or unreadable file, or one without a certificate, stops it.
    ca_bundle: str = ""
    #: Hosts (a host at one address) a fetch process keeps connections to: past that, the
    #: least recently used host's are closed. About the hosts a process fetches from within
    #: ``connection_idle`` seconds: too few, and a host's next page pays a new connection
    #: and, on HTTPS, a full TLS handshake (32 gave 1.0 new connections per page on 200 hosts).
    connection_pools: int = limited(1024, 1, 1_000_000)
    #: Seconds a kept-alive connection may wait unused before the fetcher closes it (servers
    #: close theirs after 5-75 s; one closed by the server is replaced when next needed).
    connection_idle: float = limited(30.0, 0, DAY)
    #: Seconds a fetch process reuses what a host name resolved to (vetted again at each use);
    #: 0 = ask the system's resolver at every request (a DNS query a page).
    dns_cache_seconds: float = limited(60.0, 0, DAY)
    #: Seconds to establish a TCP/TLS connection.
    connect_timeout: float = limited(10.0, 0.01, 3600)
    #: Seconds between two received bytes (and to write a request on a kept connection).
    read_timeout: float = limited(20.0, 0.01, 3600)
    #: Crawl default (``timeout``). Seconds for the whole response, every redirect hop,
    #: headers to last byte (stops trickling servers). At most 300 s: the crawl option's
    #: ceiling (below the broker's visibility timeout, state/option_checks.py).
    total_timeout: float = limited(60.0, 0.01, 300)
    #: Crawl default. Bytes of (decoded) body kept; longer bodies are cut and marked ``truncated``.
    max_body_bytes: int = limited(10 * 1024 * 1024, 1, 1 << 30)
    #: Crawl default. Redirect hops followed before the URL fails with ``too_many_redirects``.
    max_redirects: int = limited(10, 0, 100)
    #: Crawl default. Retries of a retryable failure (timeouts, resets, 5xx, 408, 429) before it is final.
    max_retries: int = limited(3, 0, 100)
    #: Crawl default. Seconds of the first retry back-off; doubles each time, with full jitter.
    retry_backoff: float = limited(2.0, 0, DAY)
    #: Crawl default. Seconds, cap of one retry back-off (must stay below ``visibility_timeout``).
    retry_backoff_max: float = limited(60.0, 0, DAY)
    #: Crawl default. Seconds a host may stay down (connections refused or timing out, its
    #: circuit open: probed every 10 s at most, its URLs waiting, their retries spared) before
    #: it is declared dead for the crawl and its pending URLs fail with ``host_down``.
    max_host_outage: float = limited(120.0, 0, 30 * DAY)

    # --- parsing -------------------------------------------------------------------------------
    #: Crawl default. Links kept per page; the rest are counted as ``skipped:too_many_links``.
    max_links_per_page: int = limited(5000, 1, 1_000_000)
    #: Crawl default. Characters of a URL; longer URLs are dropped as ``skipped:url_too_long``.
    max_url_length: int = limited(2048, 16, 1 << 20)
    #: Crawl default. Honour ``rel=nofollow`` on links and ``nofollow`` in meta robots / X-Robots-Tag.
    honour_nofollow: bool = True
    #: Crawl default. A path segment repeated this many times marks a spider trap (``/a/b/a/b/a/b``).
    max_repeated_segments: int = limited(3, 1, 1000)
    #: Crawl default. URLs admitted per host (per politeness domain) at most, seeds included; 0 = no limit.
    #: Contains spider traps (calendars, session ids); links turned away are counted as
    #: ``skipped:max_pages_per_host``. The default of the crawl option of the same name.
    max_pages_per_host: int = limited(0, 0, 10**9)

    # --- dedupe --------------------------------------------------------------------------------
    #: Crawl default. URLs the Bloom filter is sized for when a crawl sets no ``max_pages``.
    bloom_capacity: int = limited(10_000_000, 1, 10**9)
    #: Crawl default. Designed false-positive rate of the Bloom filter at capacity (0.001 = 1.8 bytes per URL;
    #: 10 M URLs cost 18 MB of Redis).
    bloom_error_rate: float = limited(0.001, 1e-9, 0.5)
    #: Crawl default. Bits per Bloom shard key (2^26 bits = 8 MiB): keeps each key far below Redis's 512 MB
    #: string limit and its first allocation short.
    bloom_shard_bits: int = limited(1 << 26, 1 << 10, 1 << 32)
    #: Crawl default: partitions of a new crawl's state (the frontier, filter and counters are
    #: split by a hash of the domain; see state/keys.py). 0 = automatic: 1 on a standalone
    #: Redis, 4 per master on a Redis Cluster, so one crawl spreads over every master.
    partitions: int = limited(0, 0, 1024)
    #: Crawl default. URLs a host's head holds in Redis (state/tails.py); the rest wait in its
    #: spill buffer and in chunks in the chunk store. 0: about 5 minutes of fetching at the
    #: host's pace (at least 4; a host without a rate limit never spills). A crawl without a
    #: chunk store (see frontier_store) never spills, whatever this says.
    frontier_head: int = limited(0, 0, 100_000_000)
    #: Crawl default. URLs per chunk: a host's spill buffer is written out when this long.
    frontier_chunk: int = limited(128, 2, 100_000)
    #: Crawl default. Seconds a host's spill buffer keeps entries before a dispatcher writes
    #: them out as one (smaller) chunk, full or not: the buffers of hosts that spill slowly
    #: stay a small share of Redis's memory, at most one chunk per host per this many seconds.
    #: 0 = at the dispatcher's next round.
    frontier_flush_seconds: float = limited(30.0, 0, DAY)
    #: Crawl default. The chunk store, a directory every worker of the crawl reads and writes
    #: (shared by every machine of a cluster) or s3://BUCKET/PREFIX. "" = ``frontier`` under
    #: the crawl's output when that is s3:// or frontier_head is given (> 0); else none: every
    #: pending URL stays in Redis (a local directory is not readable from the other machines;
    #: a machine that cannot read the mark the first one left there does not tend the tails).
    frontier_store: str = ""

    # --- politeness ----------------------------------------------------------------------------
    #: Crawl default. Requests per second per domain, cluster-wide.
    default_rate: float = limited(1.0, 0.001, 100_000)
    #: Crawl default. Extra requests a domain may receive at once after being idle (token-bucket burst).
    default_burst: int = limited(1, 0, 1000)
    #: Crawl default. Requests in flight per domain at once, cluster-wide.
    default_concurrency: int = limited(1, 1, 1000)
    #: Crawl default. Requests per second per server address (the address a host resolves to,
    #: all its hosts together), cluster-wide; 0 = no limit per address.
    ip_rate: float = limited(0.0, 0, 100_000)
    #: Crawl default. Requests in flight per server address at once (with ``ip_rate``); 0 = no limit.
    ip_concurrency: int = limited(0, 0, 100_000)
    #: Crawl default. Pace each host from its latency (AutoThrottle, state/pacing.py): interval =
    #: latency / ``autothrottle_target`` (requests in flight the server should see), between
    #: the rate's interval and 60 s.
    autothrottle: bool = False
    #: Crawl default. AutoThrottle's target: requests in flight a server should see on average.
    autothrottle_target: float = limited(1.0, 0.01, 1000)
    #: Seconds a domain lease lives before it is reclaimed (a killed worker never blocks a host).
    lease_seconds: float = limited(180.0, 0.1, DAY)
    #: Seconds, cap on a robots.txt ``Crawl-delay``.
    max_crawl_delay: float = limited(30.0, 0, DAY)
    #: Seconds, cap on a ``Retry-After`` header.
    max_retry_after: float = limited(120.0, 0, 30 * DAY)
    #: Crawl default. ``host`` or ``registered_domain`` (tldextract, offline suffix list): what one bucket covers.
    domain_key: str = "host"
    #: Seconds robots.txt stays cached in Redis.
    robots_ttl: int = limited(24 * 3600, 1, 365 * DAY)
    #: Seconds a host whose robots.txt gave 5xx/unreachable stays fully disallowed before retry.
    robots_error_ttl: int = limited(600, 1, 30 * DAY)
    #: Per-worker Celery ``rate_limit`` of the fetch task (a bandwidth cap, not politeness).
    #: Counts messages, so setting it also sets ``fetch_batch`` to 1.
    fetch_rate_limit: str = ""
    #: URLs per fetch message at most. URLs of one crawl and tier released in the same round go
    #: out together (``crawl.fetch_many``) and the worker that takes the message fetches them
    #: side by side: one delivery, ack and publish for several pages (Celery's per-message
    #: work was ~30 % of a fetch process's CPU). 1 = a ``crawl.fetch`` message per URL.
    fetch_batch: int = limited(4, 1, 1000)

    # --- frontier ------------------------------------------------------------------------------
    #: Seconds between two release rounds of the dispatcher running in every worker.
    dispatch_interval: float = limited(0.05, 0.001, 60)
    #: Domains examined per crawl per release round.
    dispatch_batch: int = limited(500, 1, 1_000_000)
    #: Messages, fetch tasks that may wait in the broker's queues for a free pool slot; the
    #: dispatcher releases nothing more while they do (0 = no cap), so a released host does
    #: not wait behind other hosts. About what all fetch pools start in one release round.
    dispatch_queue_max: int = limited(64, 0, 1_000_000)
    #: Depth up to which fetches go to ``crawl.medium``; deeper ones to ``crawl.low``; seeds
    #: (depth 0) to ``crawl.high``.
    medium_max_depth: int = limited(2, 0, 1_000_000)
    #: Seconds a fetched body waits in Redis for its parse task.
    body_ttl: int = limited(3600, 1, 30 * DAY)
    #: Bytes: an HTML body up to this size is parsed in the fetch task that got it (no parse
    #: task, no body through Redis: ~20 fewer Redis commands and one Celery task less per
    #: page); larger ones go to the ``parse`` queue, so one huge page does not hold a fetch
    #: thread's CPU. 0 = every page goes to ``parse``.
    inline_parse_bytes: int = limited(262144, 0, 1 << 30)

    # --- rendering (crawl.render workers, worker/render/browser.py) ------------------------------------
    #: The Chromium binary Playwright drives; empty: /usr/bin/chromium (the Debian package).
    chromium_path: str = ""
    #: Crawl default. Seconds one page may take to render (load, settle, every subrequest and its token wait)
    #: before it is cut off: a retry of the URL, then a recorded ``render_failed``.
    render_deadline: float = limited(20.0, 0.1, 300)
    #: Seconds after ``load`` a page has to go quiet (scripts that fetch, short timers); its
    #: subrequests' waits for tokens extend it (render_settle.py); within ``render_deadline``.
    render_settle: float = limited(3.0, 0, 3600)
    #: Seconds without a request open, a response or a short timer's callback after which a
    #: loaded page counts as quiet (worker/render/browser.py). Playwright's ``networkidle`` waits a
    #: fixed 500 ms after the last request, timers unseen: 2/3 of a render's wall time on a
    #: JS site (bench/render.py).
    render_quiet: float = limited(0.1, 0.001, 60)
    #: Seconds: a ``setTimeout`` of up to this delay is waited for (a link list filled after
    #: a short timer); longer ones, like repeating timers, are not.
    render_timer_wait: float = limited(1.0, 0, 3600)
    #: Pages of one crawl rendered in one browser context (cookies, cache and storage shared
    #: among them, never with another crawl) before a new one: a context per page costs a
    #: renderer process per page (bench/render.py: 2.2 pages/s against 5.7 shared).
    render_pages_per_context: int = limited(50, 1, 1_000_000)
    #: Pages a browser renders before it is replaced, and its processes' memory (MiB of PSS, looked
    #: at every 20 pages: ``render_max_rss_mb``) past which it is replaced: Chromium's grows.
    render_browser_pages: int = limited(200, 1, 1_000_000)
    render_max_rss_mb: int = limited(1024, 16, 1 << 20)
    #: MiB of JavaScript heap per page: a page that allocates past it crashes alone (V8 flag).
    render_js_heap_mb: int = limited(256, 16, 1 << 16)
    #: Crawl default. Subrequests (scripts, XHR, CSS...) and their bytes per page; past
    #: either, refused.
    render_max_subrequests: int = limited(100, 0, 1_000_000)
    #: Crawl default. Bytes of a page's subrequests.
    render_max_bytes: int = limited(20 * 1024 * 1024, 0, 1 << 32)
    #: Crawl default. Resource types aborted unrequested (Playwright's names), comma-separated.
    render_block: str = "image,font,media"

    # --- output --------------------------------------------------------------------------------
    #: Directory under which each crawl writes ``<crawl_id>/``.
    output_dir: str = "./data"
    #: Crawl default. Store non-HTML responses in the WARC file too.
    warc_non_html: bool = True
    #: zlib level (0-9) of each WARC record's gzip member. 1: ~0.55 ms of CPU a page of 49 KB
    #: against ~1.03 at 6 (bench/README, HTTPS real sizes), files ~7-20 % larger; a crawler
    #: is held by its CPU, rarely by its disk. 6 or 9 for archives that are kept long.
    warc_gzip_level: int = limited(1, 0, 9)
    #: Bytes after which a process closes its staged segment of an ``s3://`` crawl's files
    #: and uploads it (worker/output/uploads.py); ~1 GB WARC files, as Heritrix writes them.
    output_segment_bytes: int = limited(1_000_000_000, 1, 1 << 40)
    #: Seconds after which a staged segment is closed and uploaded however small, so that an
    #: object store holds a slow crawl's records within minutes (and a finished crawl's at once).
    output_segment_seconds: float = limited(300.0, 0.1, DAY)
    #: Index lines (captures) above which ``crawler export --wacz`` writes the compressed
    #: ZipNum index of WACZ 1.1.1 (``indexes/index.cdx.gz`` in blocks of 300 lines, and
    #: ``indexes/index.idx``, a line per block) instead of a plain ``indexes/index.cdx``:
    #: ReplayWeb.page reads a plain index whole before it shows a page, a ZipNum one a block
    #: at a time. 100,000 lines is ~30-50 MB of plain index.
    wacz_index_lines: int = limited(100_000, 1, 10**12)
    #: Seconds a finished crawl's state stays in Redis (counters, config, filter).
    finished_ttl: int = limited(7 * 24 * 3600, 1, 365 * DAY)
    #: Seconds after which a final URL whose record is still not on disk is taken as left by
    #: a dead process and written by someone else (a redelivered parse task does it at once).
    #: Longer than any pause between finish.lua and the write of a live process.
    orphan_record_seconds: float = limited(30.0, 0.1, DAY)
    #: Seconds without a heartbeat after which a worker process counts as dead and the URLs it
    #: was fetching or parsing are taken back (instead of waiting for visibility_timeout).
    worker_dead_seconds: float = limited(10.0, 0.1, DAY)
    #: Seconds a released fetch or a published parse may wait unstarted, while its broker
    #: queue is empty, before its message counts as lost with a worker and it is sent again.
    lost_message_seconds: float = limited(15.0, 0.1, DAY)

    # --- operations ----------------------------------------------------------------------------
    #: Recrawl schedules (TOML) loaded when beat starts; empty: ``config/schedules.toml``, if any.
    schedules_file: str = ""
    #: Publishers send Celery ``task-sent`` events (Flower's "sent" state). Off by default: it
    #: is one more Redis PUBLISH per task. Workers send their own task events with ``-E``.
    task_events: bool = False
    #: Port of ``crawler metrics`` (Prometheus exposition).
    metrics_port: int = limited(9808, 0, 65535)
    #: Seconds a finished (or cancelled) crawl stays in ``crawler metrics``; then its series
    #: stop (they would grow with every crawl ever run); ``crawler status`` keeps its numbers.
    metrics_finished_seconds: float = limited(3600.0, 0, 365 * DAY)
    #: Port of ``crawler dashboard`` (the crawl dashboard, a web page and its JSON API).
    dashboard_port: int = limited(8787, 0, 65535)
    #: ``user:password`` of the dashboard's HTTP basic auth; empty: no auth, accepted only on
    #: loopback. A secret: from the environment only, never shown (nor in the repr).
    dashboard_auth: str = dataclasses.field(default="", repr=False)
    #: glibc malloc arenas of a worker process (0: glibc's own, 8 a core): 2 cut a fetch
    #: process's peak RSS by ~45 MB at no measured CPU cost (worker/process/malloc.py).
    malloc_arenas: int = limited(2, 0, 1024)

    @property
    def state_url(self) -> str:
        return self.redis_url or self.broker_url

    @property
    def urls_per_message(self) -> int:
        """What one fetch message carries at most (Celery's rate limit counts messages)."""
        return 1 if self.fetch_rate_limit else self.fetch_batch


#: The range of every numeric setting, from its declaration (:func:`limited`).
LIMITS: dict[str, tuple[float, float]] = limits_of(Settings)


def load(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, then ``CRAWLER_*`` variables, then ``overrides``."""
    values = read_settings(fields(Settings), os.environ if env is None else env)
    values.update(overrides)
    check_settings(values, LIMITS, values.get("key_prefix", Settings.key_prefix))
    return Settings(**values)
