"""What happens to one URL, as plain functions the Celery tasks call.

    released by the dispatcher ──> fetch_url ──(HTML)──> parse_url ──> finalize
                                       └──(anything else)────────────> finalize

Every step is idempotent under redelivery: a URL is "in flight" exactly while it has an entry
in the crawl's inflight hash, and ``finalize`` (finish.lua) removes that entry once. A step
that finds no entry is a duplicate delivery and does nothing.

Retryable failures do not sleep and do not use Celery countdowns: the URL goes back to the
frontier with a due time (exponential back-off with jitter), so the retry also waits for the
domain's rate, lease and Retry-After like any other request.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from . import events
from .errors import CrawlerError, PermanentError, RetryableError, ServerError
from .fetch import Response
from .options import CrawlOptions
from .parse import extract, is_html
from .politeness import parse_retry_after
from .urls import origin_of
from .worker import Context

THROTTLE_STATUSES = {429, 503}
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
    stopped: list[str] = []

    def follow(target: str) -> str | None:
        reason = ctx.follow_redirect(opts, target)
        if reason:
            stopped.append(reason)
        return reason

    try:
        response = ctx.fetcher.get(
            url,
            allow_private=opts.allow_private_networks,
            headers=ctx.conditional_headers(opts, url),
            follow=follow,
        )
    except RetryableError as exc:
        polite.done(url, domain, "error")
        return retry_or_fail(ctx, opts, url, depth, exc)
    except PermanentError as exc:
        polite.done(url, domain, "ok")
        return finalize(ctx, opts, _failed(url, depth, exc))
    return _after_response(ctx, opts, url, depth, domain, response, stopped)


def _after_response(
    ctx: Context,
    opts: CrawlOptions,
    url: str,
    depth: int,
    domain: str,
    response: Response,
    stopped: list[str],
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
    if 300 <= status < 400 and status != 304:
        # Not followed on purpose: out of scope, or its target is fetched from elsewhere.
        final.error = f"redirect_{stopped[-1] if stopped else 'not_followed'}"
    elif status >= 400:
        final.error = "client_error"
    return finalize(ctx, opts, final)


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
    if not opts.obey_robots:
        return None
    robots = ctx.robots(opts).get(origin_of(url))
    delay = robots.crawl_delay(opts.robots_agent)
    if delay:
        ctx.politeness(opts).set_crawl_delay(domain, delay)
    if robots.allowed(opts.robots_agent, url):
        return None
    return Final(url, 0, error="robots_disallowed", counters={"robots_disallowed": 1})


def _failed(url: str, depth: int, exc: CrawlerError) -> Final:
    return Final(
        url,
        depth,
        error=exc.reason,
        status=getattr(exc, "status", None),
        extra={"detail": str(exc), "fetched_at": time.time()},
        counters={"failed": 1, f"failed:{exc.reason}": 1},
    )


def retry_or_fail(
    ctx: Context, opts: CrawlOptions, url: str, depth: int, exc: CrawlerError
) -> str:
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
        final.counters[f"links_dropped:{reason}"] = n
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
    out = ctx.output(opts)
    out.page(record)
    out.edges(final.url, final.outlinks)
    kind = "request_failed" if final.error else "request_completed"
    payload = {k: record[k] for k in ("url", "status", "error", "depth")}
    events.emit(ctx.client, ctx.keys.crawl(opts.crawl_id), kind, opts.crawl_id, record=payload)
    if left == 0:
        ctx.crawl_finished(opts)
    return final.error or "done"


def dumps_meta(response: Response, extra: dict[str, Any], counters: dict[str, int]) -> str:
    return json.dumps(
        {
            "status": response.status,
            "final_url": response.final_url,
            "content_type": response.content_type,
            "content_type_header": response.headers.get("content-type"),
            "headers": {
                k: v
                for k, v in response.headers.items()
                if k.lower() in ("content-type", "x-robots-tag", "content-language")
            },
            "extra": extra,
            "counters": counters,
        }
    )
