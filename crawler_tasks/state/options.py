"""What one crawl is asked to do: its scope, limits, pace, requests and output. Stored as JSON in
Redis when the crawl starts and read (and cached) by every worker; never changed afterwards.

The rule that keeps a crawl the same on every host: anything that changes a crawl's output is
a field here, fixed at start (its default comes from the starting process's settings);
:class:`~crawler_tasks.settings.Settings` is only about a process (connections, pools, paths).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, shown
from ..limits import INFINITE_OK
from ..settings import LIMITS, Settings
from ..web.scope import Scope
from .bloom import BloomShape
from .option_checks import (
    check_hooks,
    check_requests,
    check_types,
    check_values,
    number_of,
    rates_of,
)
from .pacing import check_pacing
from .render_plan import check_render

PRIORITIES = ("high", "medium", "low")
_SETTING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}
_SAME: Any = object()


def setting(name: str, unset: Any = _SAME) -> Any:
    """An option whose default is the setting ``name`` (``CRAWLER_<NAME>``) of the process that
    starts the crawl. The value is declared once, in :class:`Settings`; the link once, here.
    ``unset``: the value of options built without settings, where it is not the setting's
    default ("" user agent: each worker's own setting; 0 Bloom capacity: sized by max_pages)."""
    default = _SETTING_DEFAULTS[name] if unset is _SAME else unset
    return field(default=default, metadata={"setting": name})


@dataclass(frozen=True)
class CrawlOptions:
    crawl_id: str
    seeds: tuple[str, ...]
    #: Links followed from a seed (seed = 0); None = unlimited.
    max_depth: int | None = None
    #: URLs admitted at most; 0 = unlimited. Also sizes the Bloom filter.
    max_pages: int = 0
    #: URLs admitted per host (politeness domain), seeds included; 0 = unlimited.
    max_pages_per_host: int = setting("max_pages_per_host")
    #: Scope: ``allowed_domains`` (default: the seeds' hosts), ``include`` / ``exclude`` regexes.
    allowed_domains: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    #: The highest queue this crawl's fetches use; deeper pages step down from it.
    priority: str = "high"
    #: "bfs" (default: FIFO per domain) or "dfs" (LIFO per domain).
    order: str = "bfs"
    #: Loopback and private addresses may be crawled (the SSRF guard refuses them otherwise).
    allow_private_networks: bool = False
    #: Owner overrides, host -> requests/s (math.inf: no limit and no Crawl-delay).
    rates: dict[str, float] = field(default_factory=dict)
    rate: float = setting("default_rate")
    burst: int = setting("default_burst")
    concurrency: int = setting("default_concurrency")
    ip_rate: float = setting("ip_rate")
    ip_concurrency: int = setting("ip_concurrency")
    #: CIDRs and host-name suffixes (a CDN's) whose hosts are paced per host, not per address.
    ip_exempt: tuple[str, ...] = ()
    autothrottle: bool = setting("autothrottle")
    autothrottle_target: float = setting("autothrottle_target")
    #: ``obey_robots``: robots.txt applies; ``sitemaps``: the seeds' sitemaps are read; ``output``:
    #: the directory every worker writes to ("" = each worker's own ``CRAWLER_OUTPUT_DIR``).
    obey_robots: bool = True
    sitemaps: bool = False
    output: str = ""
    user_agent: str = setting("user_agent", unset="")
    robots_agent: str = setting("robots_agent", unset="")
    domain_key: str = setting("domain_key")
    bloom_capacity: int = setting("bloom_capacity", unset=0)
    bloom_error_rate: float = setting("bloom_error_rate")
    bloom_shard_bits: int = setting("bloom_shard_bits")
    #: Partitions of the crawl's state in Redis (state/keys.py): fixed at start; 0 (only
    #: before start) = automatic, see ``Settings.partitions``. Each partition has its own Bloom
    #: filter sized for the whole crawl (a partition may hold most URLs of a one-site crawl).
    partitions: int = setting("partitions")
    #: Hash tags of the partitions on a Redis Cluster (connection.placed_tags); () = "0".."P-1".
    partition_tags: tuple[str, ...] = ()
    #: A host's head in Redis and its tail's chunks (state/tails.py), fixed at start: every
    #: worker spills and refills the same way, to and from the same store.
    frontier_head: int = setting("frontier_head")
    frontier_chunk: int = setting("frontier_chunk")
    frontier_flush_seconds: float = setting("frontier_flush_seconds")
    frontier_store: str = setting("frontier_store")
    max_url_length: int = setting("max_url_length")
    max_repeated_segments: int = setting("max_repeated_segments")
    #: Retries of a retryable failure before it is final; back-off in seconds (doubling,
    #: full jitter, capped).
    max_retries: int = setting("max_retries")
    retry_backoff: float = setting("retry_backoff")
    retry_backoff_max: float = setting("retry_backoff_max")
    #: Seconds a host may stay down (refusing connections, timing out: its circuit open, its
    #: URLs waiting with their retries spared) before it is declared dead for the crawl and
    #: its pending URLs fail with ``host_down``.
    max_host_outage: float = setting("max_host_outage")
    #: Links kept per page; ``rel=nofollow`` honoured.
    max_links_per_page: int = setting("max_links_per_page")
    honour_nofollow: bool = setting("honour_nofollow")
    #: Bytes of decoded body kept (longer bodies are cut); redirect hops followed.
    max_body_bytes: int = setting("max_body_bytes")
    max_redirects: int = setting("max_redirects")
    #: Non-HTML responses go to the WARC file too.
    warc_non_html: bool = setting("warc_non_html")
    #: The schedule whose run this is (set by it); ``on_finished``: a task's name, sent the summary.
    schedule: str | None = None
    on_finished: str | None = None
    #: Request settings (web/profile.py): headers for every request; cookies
    #: (host -> {name: value}) and basic auth (host -> "env:NAME" of "user:pass") per host; an
    #: http(s) proxy. Secrets only as "env:NAME", read by the workers when they request.
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, dict[str, str]] = field(default_factory=dict)
    auth: dict[str, str] = field(default_factory=dict)
    proxy: str | None = None
    #: A page whose <link rel=canonical> names another URL: follow that URL (at the page's
    #: depth) instead of the page's links (worker/visit/parse_step.py ``_canonical``).
    canonical: bool = False
    #: SimHash fingerprints of pages' text; a near-duplicate (<= 3 bits) of an earlier page
    #: gets ``duplicate_of``; with ``skip_near_duplicates`` its links are not followed.
    near_duplicates: bool = False
    skip_near_duplicates: bool = False
    #: The user's extraction hook, "package.module:function" (see worker/runtime/hooks.py), run on
    #: every parsed page; ``extract_timeout`` seconds per page before it is cut off.
    extract: str | None = None
    extract_timeout: float = 30.0
    #: The user's Celery task (by name) that receives each page's items, and its queue
    #: (``on_item_queue``).
    on_item: str | None = None
    on_item_queue: str = "items"
    #: JavaScript rendering (worker/visit/render_step.py): "never", "always" or "auto" (per host,
    #: decided by sampling: state/render_plan.py); ``render_hosts`` overrides it per host.
    render: str = "never"
    render_hosts: dict[str, str] = field(default_factory=dict)
    # --- per-crawl limits that change what a crawl outputs (checks: option_checks.py) ---
    #: A render's deadline in seconds (load, settle, subrequests), its subrequests and their
    #: bytes per page, the resource types it aborts (Playwright's): state/render_config.py.
    render_deadline: float = setting("render_deadline")
    render_max_subrequests: int = setting("render_max_subrequests")
    render_max_bytes: int = setting("render_max_bytes")
    render_block: str = setting("render_block")
    #: Seconds one request may take, all its redirect hops; the repair waits longer (reap_after).
    timeout: float = setting("total_timeout")
    #: An adaptive schedule (issue 35; docs: Recrawls): a run fetches a page only when it is
    #: due, its interval learnt from the changes its visits found (web/change_rate.py),
    #: within [``min_interval``, ``max_interval``] seconds; pages not seen before are always
    #: fetched.
    adaptive: bool = False
    min_interval: float = 3600.0
    max_interval: float = 30 * 86400.0
    started_at: float = 0.0

    def __post_init__(self) -> None:
        check_values(self, _LIMITS)
        if self.priority not in PRIORITIES:
            raise ConfigError(f"priority must be one of {PRIORITIES}, not {self.priority!r}")
        if self.order not in ("bfs", "dfs"):
            raise ConfigError(f"order must be 'bfs' or 'dfs', not {self.order!r}")
        check_hooks(self)
        check_requests(self)
        check_render(self.render, self.render_hosts)
        check_pacing(self)
        # Builds the scope as every worker will (allowed domains, patterns): a crawl that
        # could not be admitted must fail here, before anything of it is written.
        self.scope  # noqa: B018

    @classmethod
    def from_user(cls, settings: Settings | None, **values: Any) -> CrawlOptions:
        """Options from what a user typed (start_crawl keywords, CLI flags, a schedule's
        ``options``): unknown names are refused with a did-you-mean, types and ranges checked.
        ``crawl_id``, ``seeds`` and ``started_at`` are given by the caller."""
        check_names(values, allowed=INTERNAL)
        return cls._checked(settings, values)

    @classmethod
    def _checked(cls, settings: Settings | None, values: dict[str, Any]) -> CrawlOptions:
        """Options from ``values`` (names known) over the settings' defaults, values checked."""
        base = cls.defaults(settings) if settings is not None else {}
        data = {**base, **{k: v for k, v in values.items() if v is not None}}
        for key in ("seeds", "allowed_domains", "include", "exclude", "ip_exempt"):
            raw = data.get(key) or ()
            if not isinstance(raw, (str, list, tuple)):
                raise ConfigError(f"{key} must be a list of strings, not {raw!r}")
            data[key] = (raw,) if isinstance(raw, str) else tuple(raw)
        data["rates"] = rates_of(data.get("rates") or {})
        for key in ("auth", "cookies", "render_hosts"):  # per host: host names as URLs have them
            if isinstance(data.get(key), dict):
                data[key] = {str(h).lower(): v for h, v in data[key].items()}
        if "rate" in data:
            data["rate"] = number_of("rate", data["rate"])
        data.setdefault("crawl_id", "-")
        check_types(cls, data)
        return cls(**data)

    @classmethod
    def defaults(cls, settings: Settings) -> dict[str, Any]:
        """Options that default to a setting (fields declared with :func:`setting`)."""
        return {
            f.name: getattr(settings, f.metadata["setting"])
            for f in dataclasses.fields(cls)
            if "setting" in f.metadata
        }

    @classmethod
    def build(
        cls,
        crawl_id: str,
        seeds: tuple[str, ...],
        settings: Settings | None,
        started_at: float,
        **options: Any,
    ) -> CrawlOptions:
        """Options of a new crawl: ``options`` (user keywords, validated here) over the defaults
        from ``settings``. Used by ``store.plan``: start_crawl, the CLI and schedules."""
        check_names(options)
        if not _CRAWL_ID.match(crawl_id):
            raise ConfigError(
                f"crawl id {shown(crawl_id)}: use 1-100 letters, digits, '.', '_' or '-' "
                "(it is part of every key name and of the hash tag that keeps a crawl together)"
            )
        values = {**options, "crawl_id": crawl_id, "seeds": seeds, "started_at": started_at}
        return cls._checked(settings, values)

    @property
    def scope(self) -> Scope:
        return Scope.for_seeds(
            list(self.seeds),
            allowed_domains=list(self.allowed_domains) or None,
            include=self.include,
            exclude=self.exclude,
            max_url_length=self.max_url_length,
            max_repeated_segments=self.max_repeated_segments,
        )

    @property
    def bloom(self) -> BloomShape:
        # A bounded crawl never admits more than max_pages URLs: size the filter for that.
        capacity = self.max_pages or self.bloom_capacity
        return BloomShape.plan(max(capacity, 1000), self.bloom_error_rate, self.bloom_shard_bits)

    def tier(self, depth: int, medium_max_depth: int) -> str:
        """Queue of a URL at ``depth``: seeds high, shallow pages medium, the rest low; never
        above the crawl's own priority."""
        wanted = 0 if depth == 0 else 1 if depth <= medium_max_depth else 2
        return "crawl." + PRIORITIES[max(wanted, PRIORITIES.index(self.priority))]

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        # JSON has no infinity: "inf" is spelled out (and is what release.lua expects).
        data["rates"] = {h: ("inf" if math.isinf(r) else r) for h, r in self.rates.items()}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> CrawlOptions:
        data = json.loads(text)
        data["rates"] = {h: float(r) for h, r in data.get("rates", {}).items()}
        for k in ("seeds", "allowed_domains", "include", "exclude", "partition_tags", "ip_exempt"):
            data[k] = tuple(data.get(k) or ())
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


#: Fields the code sets itself, never a user.
INTERNAL = ("crawl_id", "seeds", "started_at", "partition_tags")
#: Ranges of the numeric options without a setting of their own (docs/operations/limits.md);
#: an option that takes its default from a setting has its range (settings.py ``limited``).
OWN_LIMITS: dict[str, tuple[float, float]] = {
    "max_depth": (0, 100_000),
    "max_pages": (0, 10**9),
    "bloom_capacity": (0, 10**9),  # 0: sized by max_pages (options built without settings)
    "extract_timeout": (0.001, 3600),
    "min_interval": (1, 366 * 86400),  # adaptive schedules (seconds; tests drive time)
    "max_interval": (1, 366 * 86400),
}


def option_limits() -> dict[str, tuple[float, float, bool]]:
    """``name -> (lowest, highest, inf allowed)`` of every numeric crawl option."""
    out = {}
    for f in dataclasses.fields(CrawlOptions):
        name = f.metadata.get("setting", "")
        if f.name in OWN_LIMITS:
            out[f.name] = (*OWN_LIMITS[f.name], False)
        elif name in LIMITS:
            out[f.name] = (*LIMITS[name], name in INFINITE_OK)
    return out


def user_option_names() -> list[str]:
    return sorted(f.name for f in dataclasses.fields(CrawlOptions) if f.name not in INTERNAL)


def check_names(names: Any, allowed: tuple[str, ...] = ()) -> None:
    """ConfigError naming the first unknown option, with the closest known name."""
    known = user_option_names()
    for name in names:
        if name in known or name in allowed:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown crawl option {shown(name)}{hint}")


_CRAWL_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
#: Every numeric option's range, read by each CrawlOptions' check (option_checks.check_values).
_LIMITS = option_limits()
