"""What happens to one URL, as plain functions the Celery tasks call.

    released by the dispatcher ──> fetch_url ──(HTML)──> parse_url ──> finalize
                                       └──(anything else)────────────> finalize

Every step is idempotent under redelivery: a URL is "in flight" exactly while it has an entry
in the crawl's inflight hash, and ``finalize`` (finish.lua) removes that entry once. A step
that finds no entry is a duplicate delivery and does nothing.

Retryable failures do not sleep and do not use Celery countdowns: the URL goes back to the
frontier with a due time (exponential back-off with jitter), so the retry also waits for the
domain's rate, lease and Retry-After like any other request. After ``max_retries`` retries the
URL is final with the last failure's reason and its ``attempts``.

Redirect hops are followed by the fetcher; each target is scope-checked and marked seen here
(a target already seen stops the chain: ``redirect_duplicate``; out of scope:
``redirect_out_of_scope``). The targets a URL marked are remembered, so a retry or a replay of
that URL (``retry-failed``) follows them again instead of stopping at its own marks.

An unexpected exception (a bug) while handling a URL gives it the final state
``internal_error`` instead of leaving it in flight forever; only a Redis outage is raised, for
the task's own retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import CrawlerError, InternalError, PermanentError, RetryableError, ServerError
from ..state import events
from ..state.options import CrawlOptions
from ..state.politeness import parse_retry_after
from ..web.fetcher import Response
from ..web.page import extract, is_html
from ..web.urls import origin_of
from .context import Context
from .outage import REDIS_UNAVAILABLE
from .sitemap_seeds import Sitemaps

log = logging.getLogger(__name__)

THROTTLE_STATUSES = {429, 503}
#: Errors left to the Celery task's own retry (tasks.py): the URL's state cannot be written now.
INFRA_ERRORS = REDIS_UNAVAILABLE  # never a URL's fault: the task waits (tasks.patiently)
DEAD_LETTER_FIELDS = ("url", "depth", "error", "status", "detail", "attempts", "fetched_at")


@dataclass
class Final:
    """The final state of one URL: its output record and the counters it adds."""

    url: str
    depth: int
    error: str | None = None
    status: int | None = None
    final_url: str | None = None
    content_type: str | None = None
    title: str | None = None
    outlinks: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        rest = {k: v for k, v in self.extra.items() if k != "fetched_at"}
        return {
            "url": self.url,
            "final_url": self.final_url or self.url,
            "status": self.status,
            "depth": self.depth,
            "content_type": self.content_type,
            "title": self.title,
            "fetched_at": self.extra.get("fetched_at"),
            "error": self.error,
            "outlinks": self.outlinks,
            **rest,
        }


def fetch_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    """Fetch one released URL; returns what happened (for logs and tests)."""
    try:
        return _fetch_url(ctx, crawl_id, url, depth)
    except INFRA_ERRORS:
        raise
    except Exception as exc:
        return _internal_error(ctx, crawl_id, url, depth, exc, release=True)


def _fetch_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    opts = ctx.options(crawl_id)
    state = ctx.state(crawl_id)
    if opts is None or not state.start(url):
        return "duplicate"
    domain = ctx.frontier(opts).domain_of(url)
    polite = ctx.politeness(opts)
    if state.is_cancelled():
        polite.done(url, domain, "ok")
        return finalize(ctx, opts, Final(url, depth, error="cancelled", counters={"cancelled": 1}))
    events.emit(ctx.client, ctx.keys.crawl(crawl_id), "request_started", crawl_id, url=url)
    robots_verdict = _robots(ctx, opts, url, domain)
    if robots_verdict is not None:
        polite.done(url, domain, "ok")
        return finalize(ctx, opts, robots_verdict)
    try:
        response = ctx.fetcher.get(
            url,
            allow_private=opts.allow_private_networks,
            headers=ctx.conditional_headers(opts, url),
            follow=_Redirects(ctx, opts, url).follow,
        )
    except RetryableError as exc:
        polite.done(url, domain, "error")
        return retry_or_fail(ctx, opts, url, depth, exc)
    except PermanentError as exc:
        polite.done(url, domain, "ok")
        return finalize(ctx, opts, _failed(url, depth, exc))
    return _after_response(ctx, opts, url, depth, domain, response)


class _Redirects:
    """The ``follow`` callback of one fetch: vets each redirect hop of ``url``.

    A target new to the crawl is marked seen (so no link fetches it a second time) and claimed
    for ``url`` in the crawl's redirects hash; a target ``url`` claimed in an earlier attempt is
    followed again. Claims are dropped when the URL ends well (see :func:`finalize`).
    """

    def __init__(self, ctx: Context, opts: CrawlOptions, url: str) -> None:
        self.ctx, self.opts, self.url = ctx, opts, url
        self.key = ctx.keys.crawl(opts.crawl_id).redirects
        self.claimed: list[str] | None = None  # read on the first hop only

    def follow(self, target: str) -> str | None:
        if self.claimed is None:
            raw = self.ctx.client.hget(self.key, self.url)
            self.claimed = json.loads(raw) if raw else []
        if target in self.claimed:
            return None
        reason = self.ctx.follow_redirect(self.opts, target)
        if reason is None:
            self.claimed.append(target)
            self.ctx.client.hset(self.key, self.url, json.dumps(self.claimed))
        return reason


def _after_response(
    ctx: Context,
    opts: CrawlOptions,
    url: str,
    depth: int,
    domain: str,
    response: Response,
) -> str:
    polite = ctx.politeness(opts)
    status = response.status
    retry_after = parse_retry_after(
        response.headers.get("retry-after"), ctx.settings.max_retry_after
    )
    if status in THROTTLE_STATUSES:
        polite.done(url, domain, "throttle", retry_after)
    else:
        polite.done(url, domain, "error" if status >= 500 else "ok")
    if status >= 500 or status in (408, 429):
        return retry_or_fail(ctx, opts, url, depth, ServerError(status, retry_after))
    ctx.write_warc(opts, response)
    final = _base_final(url, depth, response)
    if 200 <= status < 300 and is_html(response.content_type, response.body[:1024]):
        ctx.store_body(opts, url, dumps_meta(response, final.extra, final.counters), response.body)
        ctx.enqueue_parse(opts.crawl_id, url, depth)
        return "fetched"
    if status == 304 and opts.schedule:
        return finalize(ctx, opts, _not_modified(ctx, opts, final))
    if 200 <= status < 300:
        _note_change(final, ctx.remember(opts, url, response.headers, response.body, []))
    if 300 <= status < 400 and status != 304:
        # Not followed on purpose (out of scope, or its target is fetched from elsewhere), or
        # not followable (no Location, 300/305).
        final.error = f"redirect_{response.stop_reason or 'not_followed'}"
        final.counters[f"skipped:{final.error}"] = 1
    elif status >= 400:
        final.error = "client_error"
    return finalize(ctx, opts, final)


def _not_modified(ctx: Context, opts: CrawlOptions, final: Final) -> Final:
    """A recrawl's 304: not parsed again; the previous run's links keep the crawl going."""
    final.outlinks = ctx.previous_links(opts, final.url)
    final.counters.update(ctx.admit_links(opts, final.outlinks, final.depth + 1))
    _note_change(final, "not_modified")
    return final


def _note_change(final: Final, change: str | None) -> None:
    if change is not None:
        final.extra["change"] = change
        final.counters[f"change:{change}"] = 1


def _base_final(url: str, depth: int, response: Response) -> Final:
    return Final(
        url,
        depth,
        status=response.status,
        final_url=response.final_url,
        content_type=response.content_type,
        extra={
            "fetched_at": time.time(),
            "bytes": len(response.body),
            "truncated": response.truncated,
            "redirects": [target for _, target in response.redirects],
            "ip": response.ip,
        },
        counters={"fetched": 1, f"status:{response.status}": 1, "bytes": len(response.body)},
    )


def _robots(ctx: Context, opts: CrawlOptions, url: str, domain: str) -> Final | None:
    """What robots.txt says of ``url`` (a Final when it is not to be fetched), and the
    politeness accounting of this fetch (see ``politeness``): robots.txt, when it had to be
    requested, is charged to the domain's bucket; its Crawl-delay is applied; a disallowed URL
    gives its token back. With ``sitemaps``, an origin's ``Sitemap:`` URLs are admitted the
    first time, and a released sitemap file is fetched and used here (see ``sitemap_seeds``)."""
    if not (opts.obey_robots or opts.sitemaps):
        return None
    polite = ctx.politeness(opts)
    origin = origin_of(url)
    robots = ctx.robots(opts).get(origin, lambda: polite.extra_request(domain))
    if opts.obey_robots:
        if not robots.allowed(opts.robots_agent, url):
            polite.refund(url, domain)
            return Final(url, 0, error="robots_disallowed", counters={"robots_disallowed": 1})
        polite.set_crawl_delay(domain, robots.crawl_delay(opts.robots_agent))
    if opts.sitemaps:
        maps = Sitemaps(ctx, opts)
        maps.discover(origin, robots)
        if maps.is_sitemap(url):
            return Final(url, 0, **maps.fetch(url))
    return None


def _failed(url: str, depth: int, exc: CrawlerError) -> Final:
    details = exc.details
    status = getattr(exc, "status", None) or details.get("status")
    final = Final(
        url,
        depth,
        error=exc.reason,
        status=status if isinstance(status, int) else None,
        final_url=_text(details.get("final_url")),
        content_type=_text(details.get("content_type")),
        extra={"detail": str(exc)[:500], "fetched_at": time.time()},
        counters={"failed": 1, f"failed:{exc.reason}": 1},
    )
    redirects = details.get("redirects")
    if isinstance(redirects, list) and redirects:
        final.extra["redirects"] = [target for _, target in redirects]
    return final


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _internal_error(
    ctx: Context, crawl_id: str, url: str, depth: int, exc: Exception, *, release: bool
) -> str:
    """Give ``url`` a final state after a bug; the log has the traceback."""
    log.exception("crawl %s: internal error on %.300s", crawl_id, url)
    opts = ctx.options(crawl_id)
    if opts is None:
        raise exc
    if release:  # the domain's lease, or the domain waits for its expiry
        with contextlib.suppress(Exception):
            ctx.politeness(opts).done(url, ctx.frontier(opts).domain_of(url), "error")
    error = InternalError(f"{type(exc).__name__}: {exc}")
    return finalize(ctx, opts, _failed(url, depth, error))


def retry_or_fail(ctx: Context, opts: CrawlOptions, url: str, depth: int, exc: CrawlerError) -> str:
    state = ctx.state(opts.crawl_id)
    attempts = state.count_attempt(url)
    if attempts > ctx.settings.max_retries:
        final = _failed(url, depth, exc)
        final.extra["attempts"] = attempts
        return finalize(ctx, opts, final)
    base = ctx.settings.retry_backoff * 2 ** (attempts - 1)
    delay = random.uniform(0, min(base, ctx.settings.retry_backoff_max))  # full jitter
    delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
    domain = ctx.frontier(opts).domain_of(url)
    return "retry" if state.requeue(domain, f"{depth}|{url}", url, delay) else "duplicate"


def parse_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    try:
        return _parse_url(ctx, crawl_id, url, depth)
    except INFRA_ERRORS:
        raise
    except Exception as exc:
        return _internal_error(ctx, crawl_id, url, depth, exc, release=False)


def _parse_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    opts = ctx.options(crawl_id)
    if opts is None:
        return "duplicate"
    stored = ctx.load_body(opts, url)
    if stored is None:
        if not ctx.state(crawl_id).is_inflight(url):
            return "duplicate"
        return finalize(ctx, opts, Final(url, depth, error="body_lost", counters={"failed": 1}))
    meta, body = stored
    page = extract(
        body,
        meta["final_url"],
        content_type=meta.get("content_type_header"),
        headers=meta.get("headers") or {},
        max_links=ctx.settings.max_links_per_page,
        max_url_length=opts.max_url_length,
        honour_nofollow=ctx.settings.honour_nofollow,
    )
    skipped = ctx.admit_links(opts, page.links, depth + 1)
    final = Final(
        url,
        depth,
        status=meta["status"],
        final_url=meta["final_url"],
        content_type=meta.get("content_type"),
        title=page.title,
        outlinks=page.links,
        extra={
            **meta["extra"],
            "description": page.description,
            "language": page.language,
            "canonical": page.canonical,
            "text_length": page.text_length,
            "noindex": page.noindex,
        },
        counters={**meta["counters"], "parsed": 1, **skipped},
    )
    for reason, n in page.links_dropped.items():
        if n:
            final.counters[f"links_dropped:{reason}"] = n
    _note_change(final, ctx.remember(opts, url, meta.get("headers") or {}, body, page.links))
    result = finalize(ctx, opts, final)
    ctx.drop_body(opts, url)
    return result


def finalize(ctx: Context, opts: CrawlOptions, final: Final) -> str:
    """Record a URL's final state once; the call that empties the crawl finishes it."""
    counters = dict(final.counters)
    counters["done"] = 1
    state = ctx.state(opts.crawl_id)
    record = final.record()
    if "failed" in counters:
        # Before finish: a dead letter for a URL that then turns out final already is harmless.
        state.dead_letter(final.url, {k: record.get(k) for k in DEAD_LETTER_FIELDS})
    left = state.finish(final.url, counters)
    if left < 0:
        return "duplicate"
    if final.extra.get("redirects") and "failed" not in counters:
        # Claims of a URL that ended well are no longer needed; a failed one keeps them for
        # retry-failed. Not atomic with finish: a leftover entry only costs its bytes.
        ctx.client.hdel(ctx.keys.crawl(opts.crawl_id).redirects, final.url)
    out = ctx.output(opts)
    out.page(record)
    out.edges(final.url, final.outlinks)
    kind = "request_failed" if final.error else "request_completed"
    payload = {k: record[k] for k in ("url", "status", "error", "depth")}
    events.emit(ctx.client, ctx.keys.crawl(opts.crawl_id), kind, opts.crawl_id, record=payload)
    if left == 0:
        ctx.crawl_finished(opts)
    return final.error or "done"


# Response headers the parse step (and the recrawl validators) need.
_KEPT_HEADERS = ("content-type", "x-robots-tag", "content-language", "etag", "last-modified")


def dumps_meta(response: Response, extra: dict[str, Any], counters: dict[str, int]) -> str:
    return json.dumps(
        {
            "status": response.status,
            "final_url": response.final_url,
            "content_type": response.content_type,
            "content_type_header": response.headers.get("content-type"),
            "headers": {k: v for k, v in response.headers.items() if k.lower() in _KEPT_HEADERS},
            "extra": extra,
            "counters": counters,
        }
    )
