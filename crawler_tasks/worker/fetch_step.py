"""The fetch step of one released URL: what start.lua, robots.txt and the request say of it,
as a :class:`~crawler_tasks.worker.settle.Decision` (what becomes of the URL and how the
host's lease ends). Nothing here returns the lease or records the URL: ``settle`` does, once.

Redirect hops are followed by the fetcher; each target is scope-checked and marked seen by
admission's claims (a target already seen stops the chain: ``redirect_duplicate``; out of
scope: ``redirect_out_of_scope``). The targets a URL marked are remembered, so a retry or a
replay of that URL (``retry-failed``) follows them again instead of stopping at its own marks.

A failure to connect at all (:class:`~crawler_tasks.errors.Unreachable`) is what a host outage
looks like: its lease ends ``down`` and the host's circuit breaker decides (settle.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import (
    HostDown,
    PermanentError,
    RetryableError,
    ServerError,
    TLSError,
    Unreachable,
)
from ..state import events, formats
from ..state.formats import Counter, LeaseEnd, Outcome, RenderAsk, Started
from ..state.pacing import Answer
from ..state.politeness import parse_retry_after
from ..state.store import CrawlStore
from ..web.fetcher import Response
from ..web.page import is_html
from ..web.urls import origin_of
from .context import Context
from .parse_step import parsed
from .recorder import Final
from .settle import Decision, Next
from .sitemap_seeds import Sitemaps

THROTTLE_STATUSES = {429, 503}


def decide(
    ctx: Context, store: CrawlStore, url: str, depth: int, started: Started | None
) -> Decision:
    """What becomes of ``url``; ``started``: start.lua's word on it if already asked."""
    if started is None:
        started = Started(store.ledger.start(url, ctx.worker_id))
    if started is Started.DUPLICATE:
        return Decision(Next.DUPLICATE, lease=None)
    if started is Started.UNRECORDED:  # the process that finished it died before its record
        return Decision(Next.RECOVER, lease=None)
    if started is Started.CANCELLED:
        return Decision.record(Final.cancelled(url, depth))
    domain = store.domain_of(url)
    if started is Started.HOST_DEAD:  # declared dead in this crawl: no request
        down = Final.failed(url, depth, HostDown(f"{domain} is down"))
        return Decision.record(down, LeaseEnd.REFUND)
    events.emit(ctx.client, store.ck, "request_started", store.id, url=url)
    robots_verdict = _robots(ctx, store, url, depth, domain)
    if robots_verdict is not None:
        return Decision.record(robots_verdict)
    return _request(ctx, store, url, depth)


def _request(ctx: Context, store: CrawlStore, url: str, depth: int) -> Decision:
    conditional = store.recrawl.conditional_headers(url) if store.recrawl else {}
    try:
        follow = store.admission.claims(url).follow
        response = ctx.crawl(store).fetch(url, follow, conditional)
    except Unreachable as exc:
        return Decision(Next.UNREACHABLE, LeaseEnd.DOWN, error=exc)
    except RetryableError as exc:  # connected, then failed: the URL's own problem
        return Decision.retry(exc)
    except PermanentError as exc:
        if isinstance(exc, TLSError):
            note_tls(store, url, str(exc))
        return Decision.record(Final.failed(url, depth, exc))
    return _answered(ctx, store, url, depth, response)


def _answered(
    ctx: Context, store: CrawlStore, url: str, depth: int, response: Response
) -> Decision:
    """A response: the lease ends by its status; 5xx, 408 and 429 are retried."""
    status = response.status
    retry_after = parse_retry_after(
        response.headers.get("retry-after"), ctx.settings.max_retry_after
    )
    if status in THROTTLE_STATUSES:
        decision = Decision(Next.RETRY, LeaseEnd.THROTTLE, retry_after=retry_after)
    elif status >= 500:
        decision = Decision(Next.RETRY, LeaseEnd.ERROR)
    else:  # paced from when the request was sent (politeness.py)
        sent = time.monotonic() - response.sent_at if response.sent_at is not None else -1.0
        decision = Decision(Next.RESPONSE, LeaseEnd.OK, sent=sent)
    latency = -1.0 if response.latency is None else response.latency
    decision.answer = Answer(response.ip or "", latency, 200 <= status < 300)
    if status >= 500 or status in (408, 429):
        # Counted now: the URL's final record (a retry's, or a failure) will not carry it.
        store.stats.add(formats.status(status))
        decision.next, decision.error = Next.RETRY, ServerError(status, retry_after)
    else:
        decision.then = lambda: respond(ctx, store, url, depth, response)
    return decision


def respond(
    ctx: Context, store: CrawlStore, url: str, depth: int, response: Response
) -> Final | None:
    """What a response that is not retried becomes, its lease returned: its final state, or
    None when its body went to a parse task."""
    status = response.status
    warc_id = ctx.crawl(store).write_warc(response)
    final = _base_final(url, depth, response)
    if 200 <= status < 300 and is_html(response.content_type, response.body[:1024]):
        meta = response_meta(response, final.extra, final.counters, bool(store.opts.extract))
        opts = store.opts
        ask = store.render_plan.wants(opts.render, opts.render_hosts, url, response.body)
        if ask:
            # Rendered by a crawl.render worker (render_step.py), from this body.
            tentative = ask is RenderAsk.TENTATIVE  # looked at again when its render starts
            doc = {**meta, "warc_id": warc_id, "render_tentative": tentative}
            doc["queued_at"] = time.time()
            store.bodies.put(url, json.dumps(doc), response.body)
            store.ledger.mark_render_queued(url)  # before the publish, as for a parse
            ctx.enqueue_render(store.id, url, depth)
            return None
        if len(response.body) <= ctx.settings.inline_parse_bytes:
            # Parsed here: no parse task, no body through Redis (see Settings).
            return parsed(ctx, store, url, depth, meta, response.body)
        store.bodies.put(url, json.dumps(meta), response.body)
        store.ledger.mark_parse_queued(url)  # before the publish: the parse may start at once
        ctx.enqueue_parse(store.id, url, depth)
        return None
    if status == 304 and store.recrawl is not None:
        ctx.room.wait()
        final.outlinks = store.recrawl.previous_links(url)
        final.counters.update(store.admission.links(final.outlinks, depth + 1))
        final.note_change(Outcome.NOT_MODIFIED.value)
        return final
    if 200 <= status < 300 and store.recrawl is not None:
        final.note_change(store.recrawl.remember(url, response.headers, response.body, []))
    if 300 <= status < 400 and status != 304:
        # Not followed on purpose (out of scope, or its target is fetched from elsewhere), or
        # not followable (no Location, 300/305).
        final.error = f"redirect_{response.stop_reason or 'not_followed'}"
        final.counters[formats.skipped(final.error)] = 1
    elif status >= 400:
        final.error = Outcome.CLIENT_ERROR.value
    return final


def _base_final(url: str, depth: int, response: Response) -> Final:
    n = len(response.body)
    return Final(
        url,
        depth,
        status=response.status,
        final_url=response.final_url,
        content_type=response.content_type,
        extra={
            "fetched_at": time.time(),
            "bytes": n,
            "truncated": response.truncated,
            "redirects": [target for _, target in response.redirects],
            "ip": response.ip,
        },
        counters={
            Counter.FETCHED.value: 1,
            formats.status(response.status): 1,
            Counter.BYTES.value: n,
        },
    )


def note_tls(store: CrawlStore, url: str, why: str) -> None:
    """The crawl's first TLS failure, named in ``status`` and the summary (a private CA the
    workers were not given is the usual cause: the hint is in the summary)."""
    store.status.first_note(formats.TLS_NOTE, f"{origin_of(url)}: {TLSError.reason}: {why}")


def _robots(ctx: Context, store: CrawlStore, url: str, depth: int, domain: str) -> Final | None:
    """What robots.txt says of ``url`` (a Final when it is not to be fetched), and the
    politeness accounting of this fetch (see ``politeness``): robots.txt, when it had to be
    requested, is charged to the domain's bucket; its Crawl-delay is applied; a disallowed URL
    gives its token back. With ``sitemaps``, an origin's ``Sitemap:`` URLs are admitted the
    first time, and a released sitemap file is fetched and used here (see ``sitemap_seeds``)."""
    opts = store.opts
    if not (opts.obey_robots or opts.sitemaps):
        return None
    polite = store.politeness
    origin = origin_of(url)
    robots = ctx.crawl(store).robots.get(origin, lambda: polite.extra_request(domain))
    if opts.obey_robots:
        if not robots.allowed(opts.robots_agent, url):
            # Its token back; the lease itself ends "ok" (settle), as robots.txt was read.
            polite.refund(url, domain)
            tls = _tls_why(robots.why)
            if tls is not None:  # the page's own handshake would fail the same way
                note_tls(store, url, tls)
                final = Final.failed(url, depth, TLSError(tls))
                final.extra["detail"] = f"robots.txt: {TLSError.reason}: {tls}"
                return final
            # A disallow-all policy only comes from a robots.txt that could not be read.
            unreachable = robots.kind == "disallow"
            reason = (
                Outcome.ROBOTS_UNREACHABLE if unreachable else Outcome.ROBOTS_DISALLOWED
            ).value
            counter = Counter.ROBOTS_UNREACHABLE if unreachable else Counter.ROBOTS_DISALLOWED
            final = Final(url, 0, error=reason, counters={counter.value: 1}, recorded=unreachable)
            if unreachable:  # why it could not be read: a TLS or connection failure, a 5xx
                final.extra["detail"] = f"robots.txt: {robots.why or 'unreachable'}"
                store.status.first_note("robots_unreachable_why", f"{origin}: {robots.why}")
            return final
        polite.set_crawl_delay(domain, robots.crawl_delay(opts.robots_agent))
    if opts.sitemaps:
        maps = Sitemaps(ctx, store)
        maps.discover(origin, robots)
        if maps.is_sitemap(url):
            return Final(url, 0, **maps.fetch(url))
    return None


def _tls_why(robots_why: str) -> str | None:
    """The TLS failure that made robots.txt unreadable (robots_getter's "tls_error: ...")."""
    head, sep, why = robots_why.partition(": ")
    return why if sep and head == TLSError.reason else None


# Response headers the parse step (and the recrawl validators) need.
_KEPT_HEADERS = ("content-type", "x-robots-tag", "content-language", "etag", "last-modified")


def response_meta(
    response: Response, extra: dict[str, Any], counters: dict[str, int], all_headers: bool = False
) -> dict[str, Any]:
    """The response as its parse step needs it; ``all_headers`` (a crawl with an extraction
    hook) keeps every header but Set-Cookie, which may carry a session."""
    kept = (lambda k: k != "set-cookie") if all_headers else (lambda k: k in _KEPT_HEADERS)
    return {
        "status": response.status,
        "final_url": response.final_url,
        "content_type": response.content_type,
        "content_type_header": response.headers.get("content-type"),
        "headers": {k: v for k, v in response.headers.items() if kept(k.lower())},
        "extra": extra,
        "counters": counters,
    }
