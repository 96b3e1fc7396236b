"""What happens to one URL, as plain functions the Celery tasks call.

    released by the dispatcher ──> fetch_url ──(HTML)──> parse_url ──> recorder.finalize
                                       └──(anything else)────────────> recorder.finalize

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

While Redis is nearly full (``maxmemory``), a page waits for room before its links are
admitted (worker/room.py); after ``admission_wait`` its URL is handed back to the frontier,
to be fetched again, without spending a retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from ..errors import (
    AdmissionPaused,
    ConnectionFailed,
    CrawlerError,
    FetchTimeout,
    HostDown,
    PermanentError,
    RetryableError,
    ServerError,
)
from ..state import events, formats
from ..state.formats import Counter, Outcome
from ..state.neardup import NearDuplicates
from ..state.politeness import parse_retry_after
from ..state.store import CrawlStore
from ..web.fetcher import Response
from ..web.page import ParsedHTML, extract, is_html
from ..web.robots import Robots
from ..web.urls import origin_of
from . import hooks
from .context import Context
from .outage import REDIS_UNAVAILABLE
from .recorder import Final, finalize, recover
from .sitemap_seeds import Sitemaps

log = logging.getLogger(__name__)

THROTTLE_STATUSES = {429, 503}
#: Errors left to the Celery task's own retry (tasks.py): the URL's state cannot be written now.
INFRA_ERRORS = REDIS_UNAVAILABLE  # never a URL's fault: the task waits (tasks.patiently)
#: Items per on_item task message.
ITEM_BATCH = 100


def fetch_url(
    ctx: Context, crawl_id: str, url: str, depth: int, begun: dict[str, int] | None = None
) -> str:
    """Fetch one released URL; returns what happened (for logs and tests). ``begun``: what
    :func:`begin` said of it, used once (a run again after a Redis outage asks again)."""
    started = begun.pop(url, None) if begun else None

    def step(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
        return _fetch_url(ctx, crawl_id, url, depth, started)

    return _guarded(step, ctx, crawl_id, url, depth, release=True)


def begin(ctx: Context, crawl_id: str, urls: list[str]) -> dict[str, int]:
    """start.lua for the URLs of one message at once (one round trip per partition), for
    :func:`fetch_url`; {} when that cannot be said here, so each URL asks on its own."""
    store = ctx.store(crawl_id)
    if store is None:
        return {}
    try:
        return store.ledger.start_many(urls, ctx.worker_id)
    except INFRA_ERRORS:
        raise
    except Exception:  # a bug: each URL's own start gets its own internal_error path
        log.exception("crawl %s: starting %d URLs together failed", crawl_id, len(urls))
        return {}


def _guarded(
    step: Callable[[Context, str, str, int], str],
    ctx: Context,
    crawl_id: str,
    url: str,
    depth: int,
    *,
    release: bool,
) -> str:
    """Run one step of a URL. A bug gives the URL its final state (internal_error) instead of
    leaving it in flight; Redis being away is the task's to wait out (tasks.patiently)."""
    try:
        return step(ctx, crawl_id, url, depth)
    except INFRA_ERRORS:
        raise
    except AdmissionPaused:
        return _hand_back(ctx, crawl_id, url, depth, parse=not release)
    except Exception as exc:
        return _internal_error(ctx, crawl_id, url, depth, exc, release=release)


def _fetch_url(ctx: Context, crawl_id: str, url: str, depth: int, started: int | None) -> str:
    store = ctx.store(crawl_id)
    if store is None:
        return "duplicate"
    if started is None:
        started = store.ledger.start(url, ctx.worker_id)
    if started == 0:
        return "duplicate"
    if started == 2:  # final, but the process that finished it died before its record
        return recover(ctx, store, url)
    domain = store.domain_of(url)
    polite = store.politeness
    if started == 3:  # the crawl was cancelled
        polite.done(url, domain, "ok")
        return finalize(ctx, store, Final.cancelled(url, depth))
    if started == 4:  # its host was declared dead in this crawl: no request
        polite.refund(url, domain)
        return finalize(ctx, store, Final.failed(url, depth, HostDown(f"{domain} is down")))
    events.emit(ctx.client, store.ck, "request_started", crawl_id, url=url)
    robots_verdict = _robots(ctx, store, url, domain)
    if robots_verdict is not None:
        polite.done(url, domain, "ok")
        return finalize(ctx, store, robots_verdict)
    conditional = store.recrawl.conditional_headers(url) if store.recrawl else {}
    try:
        response = ctx.fetch(store.opts, url, store.admission.claims(url).follow, conditional)
    except (ConnectionFailed, FetchTimeout) as exc:
        if not exc.details.get("connect"):  # connected, then failed: the URL's own problem
            polite.done(url, domain, "error")
            return retry_or_fail(ctx, store, url, depth, exc)
        down_for, dead = polite.down(url, domain)
        if dead:
            final = Final.failed(url, depth, exc)
            final.extra["attempts"] = store.ledger.count_attempt(url)
            result = finalize(ctx, store, final)
            _fail_dead_host(ctx, store, domain)
            return result
        if down_for >= 0:
            # The whole host is down (circuit open): the URL waits for it, its retries spared.
            return _requeue(store, url, depth, 0.0)
        return retry_or_fail(ctx, store, url, depth, exc)
    except RetryableError as exc:
        polite.done(url, domain, "error")
        return retry_or_fail(ctx, store, url, depth, exc)
    except PermanentError as exc:
        polite.done(url, domain, "ok")
        return finalize(ctx, store, Final.failed(url, depth, exc))
    return _after_response(ctx, store, url, depth, domain, response)


def _after_response(
    ctx: Context, store: CrawlStore, url: str, depth: int, domain: str, response: Response
) -> str:
    status = response.status
    retry_after = parse_retry_after(
        response.headers.get("retry-after"), ctx.settings.max_retry_after
    )
    if status in THROTTLE_STATUSES:
        store.politeness.done(url, domain, "throttle", retry_after)
    elif status >= 500:
        store.politeness.done(url, domain, "error")
    else:  # paced from when the request was sent (politeness.py)
        sent = time.monotonic() - response.sent_at if response.sent_at is not None else -1.0
        store.politeness.done(url, domain, "ok", sent=sent)
    if status >= 500 or status in (408, 429):
        return retry_or_fail(ctx, store, url, depth, ServerError(status, retry_after))
    ctx.write_warc(store.opts, response)
    final = _base_final(url, depth, response)
    if 200 <= status < 300 and is_html(response.content_type, response.body[:1024]):
        meta = response_meta(response, final.extra, final.counters, bool(store.opts.extract))
        if len(response.body) <= ctx.settings.inline_parse_bytes:
            # Parsed here: no parse task, no body through Redis (see Settings).
            return finalize(ctx, store, _parsed(ctx, store, url, depth, meta, response.body))
        store.bodies.put(url, json.dumps(meta), response.body)
        store.ledger.mark_parse_queued(url)  # before the publish: the parse may start at once
        ctx.enqueue_parse(store.id, url, depth)
        return "fetched"
    if status == 304 and store.recrawl is not None:
        ctx.room.wait()
        final.outlinks = store.recrawl.previous_links(url)
        final.counters.update(store.admission.links(final.outlinks, depth + 1))
        final.note_change(Outcome.NOT_MODIFIED.value)
        return finalize(ctx, store, final)
    if 200 <= status < 300 and store.recrawl is not None:
        final.note_change(store.recrawl.remember(url, response.headers, response.body, []))
    if 300 <= status < 400 and status != 304:
        # Not followed on purpose (out of scope, or its target is fetched from elsewhere), or
        # not followable (no Location, 300/305).
        final.error = f"redirect_{response.stop_reason or 'not_followed'}"
        final.counters[formats.skipped(final.error)] = 1
    elif status >= 400:
        final.error = Outcome.CLIENT_ERROR.value
    return finalize(ctx, store, final)


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


def _robots(ctx: Context, store: CrawlStore, url: str, domain: str) -> Final | None:
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
    robots = ctx.robots(opts).get(origin, lambda: polite.extra_request(domain))
    if opts.obey_robots:
        if not robots.allowed(opts.robots_agent, url):
            polite.refund(url, domain)
            # A disallow-all policy only comes from a robots.txt that could not be read.
            unreachable = robots.kind == "disallow"
            reason = (
                Outcome.ROBOTS_UNREACHABLE if unreachable else Outcome.ROBOTS_DISALLOWED
            ).value
            counter = Counter.ROBOTS_UNREACHABLE if unreachable else Counter.ROBOTS_DISALLOWED
            return Final(url, 0, error=reason, counters={counter.value: 1}, recorded=unreachable)
        polite.set_crawl_delay(domain, robots.crawl_delay(opts.robots_agent))
    if opts.sitemaps:
        maps = Sitemaps(ctx, store)
        maps.discover(origin, robots)
        if maps.is_sitemap(url):
            return Final(url, 0, **maps.fetch(url))
    return None


def _hand_back(ctx: Context, crawl_id: str, url: str, depth: int, *, parse: bool) -> str:
    """Redis had no room for the page's links for ``admission_wait`` s: nothing of the page was
    written, its lease is returned (done.lua ran), so its URL goes back to the frontier as it
    was, its retries untouched (the dispatcher releases nothing until there is room)."""
    store = ctx.store(crawl_id)
    if store is None:
        return "duplicate"
    if parse:
        store.bodies.drop(url)  # fetched again: its stored body only takes the room
    return _requeue(store, url, depth, 0.0)


def _internal_error(
    ctx: Context, crawl_id: str, url: str, depth: int, exc: Exception, *, release: bool
) -> str:
    """Give ``url`` a final state after a bug; the log has the traceback."""
    log.exception("crawl %s: internal error on %.300s", crawl_id, url)
    store = ctx.store(crawl_id)
    if store is None:
        raise exc
    if release:  # the domain's lease, or the domain waits for its expiry
        with contextlib.suppress(Exception):
            store.politeness.done(url, store.domain_of(url), "error")
    return finalize(ctx, store, Final.internal(url, depth, exc))


def retry_or_fail(ctx: Context, store: CrawlStore, url: str, depth: int, exc: CrawlerError) -> str:
    opts = store.opts
    attempts = store.ledger.count_attempt(url)
    if attempts > opts.max_retries:
        final = Final.failed(url, depth, exc)
        final.extra["attempts"] = attempts
        return finalize(ctx, store, final)
    base = opts.retry_backoff * 2 ** (attempts - 1)
    delay = random.uniform(0, min(base, opts.retry_backoff_max))  # full jitter
    delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
    return _requeue(store, url, depth, delay)


def _fail_dead_host(ctx: Context, store: CrawlStore, domain: str) -> None:
    """Every pending URL of a host declared dead gets its final state now, unrequested."""
    down = HostDown(f"{domain} down for {store.opts.max_host_outage:g}s or more")
    pending = store.politeness.drain(domain)
    for depth, url in pending:
        finalize(ctx, store, Final.failed(url, depth, down))
    log.warning("crawl %s: %s is down; %d pending URLs failed", store.id, domain, len(pending))


def _requeue(store: CrawlStore, url: str, depth: int, delay: float) -> str:
    requeued = store.ledger.requeue(store.domain_of(url), depth, url, delay)
    return "retry" if requeued else "duplicate"


def parse_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    return _guarded(_parse_url, ctx, crawl_id, url, depth, release=False)


def _parse_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    store = ctx.store(crawl_id)
    started = store.ledger.start(url, ctx.worker_id, "p") if store is not None else 0
    if store is None or started == 0:
        return "duplicate"
    if started == 2:
        return recover(ctx, store, url)
    stored = store.bodies.get(url)
    if stored is None:
        lost = Final(url, depth, error=Outcome.BODY_LOST.value, counters={Counter.FAILED.value: 1})
        return finalize(ctx, store, lost)
    meta, body = stored
    final = _parsed(ctx, store, url, depth, meta, body)
    result = finalize(ctx, store, final)
    store.bodies.drop(url)
    return result


def _parsed(
    ctx: Context, store: CrawlStore, url: str, depth: int, meta: dict[str, Any], body: bytes
) -> Final:
    opts = store.opts
    page = extract(
        body,
        meta["final_url"],
        content_type=meta.get("content_type_header"),
        headers=meta.get("headers") or {},
        max_links=opts.max_links_per_page,
        max_url_length=opts.max_url_length,
        honour_nofollow=opts.honour_nofollow,
        keep_tree=bool(opts.extract),
        fingerprint=opts.near_duplicates or opts.skip_near_duplicates,
    )
    final = Final(
        url,
        depth,
        status=meta["status"],
        final_url=meta["final_url"],
        content_type=meta.get("content_type"),
        title=page.title,
        extra={
            **meta["extra"],
            "description": page.description,
            "language": page.language,
            "canonical": page.canonical,
            "text_length": page.text_length,
            "noindex": page.noindex,
        },
        counters={**meta["counters"], Counter.PARSED.value: 1},
    )
    _follow(ctx, store, final, meta, page)
    for reason, n in page.links_dropped.items():
        if n:
            final.counters[formats.links_dropped(reason)] = n
    if store.recrawl is not None:
        headers = meta.get("headers") or {}
        final.note_change(store.recrawl.remember(url, headers, body, page.links))
    return final


def _follow(
    ctx: Context, store: CrawlStore, final: Final, meta: dict[str, Any], page: ParsedHTML
) -> None:
    """What the page leads to: its canonical URL instead of its links (``canonical``), or
    its links (as the hook changed them, none for a skipped near-duplicate), admitted."""
    opts, url, depth = store.opts, final.url, final.depth
    ctx.room.wait()  # before anything of the page is written (hook items, fingerprint, links)
    alias = _canonical(opts.canonical, page.canonical, final.final_url or url)
    if alias is not None:
        final.extra["canonical_followed"] = True
        final.outlinks = [alias]
        final.counters.update(store.admission.links([alias], depth))
        return
    links = page.links
    if opts.extract:
        hooked = _hook(ctx, store, url, depth, meta, page)
        final.add_items(hooked.items, hooked.error)
        links = hooked.links
    if page.simhash is not None:
        # Through admission's client: a fingerprint refused for memory waits in place (room.py).
        original = NearDuplicates(store.admission.client, store.ck).check(url, page.simhash)
        final.extra["duplicate_of"] = original
        if original is not None:
            final.counters[Counter.NEAR_DUPLICATES.value] = 1
            if opts.skip_near_duplicates:
                links = []
    final.outlinks = links
    final.counters.update(store.admission.links(links, depth + 1, _disallowed(ctx, store)))


def _disallowed(ctx: Context, store: CrawlStore) -> Callable[[str], bool] | None:
    """Which links robots.txt refuses, as far as this process already knows their origins'
    rules: they are counted at admission and never become fetch tasks (admission.py). An
    unreadable robots.txt (disallow-all until it is read again) decides nothing here."""
    opts = store.opts
    if not opts.obey_robots:
        return None
    cache, agent = ctx.robots(opts), opts.robots_agent
    origins: dict[str, Robots | None] = {}

    def refused(url: str) -> bool:
        origin = origin_of(url)
        if origin not in origins:
            origins[origin] = cache.known(origin)
        robots = origins[origin]
        return robots is not None and robots.kind == "parsed" and not robots.allowed(agent, url)

    return refused


def _canonical(enabled: bool, canonical: str | None, final_url: str) -> str | None:
    """The canonical URL to follow instead of this page, if it names another URL."""
    if not enabled or canonical is None or canonical == final_url:
        return None
    return canonical


def _hook(
    ctx: Context, store: CrawlStore, url: str, depth: int, meta: dict[str, Any], page: ParsedHTML
) -> hooks.HookResult:
    """The crawl's extraction hook on this page, and its items sent to ``on_item``."""
    opts = store.opts
    view = hooks.Page(
        url=url,
        final_url=meta["final_url"],
        status=meta["status"],
        headers={k.lower(): v for k, v in (meta.get("headers") or {}).items()},
        depth=depth,
        crawl_id=store.id,
        text=page.html or "",
        tree=page.tree,
        links=tuple(page.links),
        title=page.title,
        canonical=page.canonical,
    )
    assert opts.extract is not None
    outcome = ctx.hooks.run(opts.extract, view, opts.extract_timeout)
    if outcome.error is None and outcome.items and opts.on_item:
        try:
            for i in range(0, len(outcome.items), ITEM_BATCH):
                batch = outcome.items[i : i + ITEM_BATCH]
                ctx.send_items(opts.on_item, opts.on_item_queue, store.id, url, depth, batch)
        except Exception as exc:  # the broker refused it: the page keeps its items on disk
            outcome.error = f"on_item: {type(exc).__name__}: {exc}"[:500]
    if outcome.error is not None:
        log.warning("crawl %s: extract_error on %.300s: %s", store.id, url, outcome.error)
    return outcome


def item_task_failed(ctx: Context, crawl_id: str, url: str, depth: int, error: str) -> None:
    """The user's on_item task raised on ``url``'s items (the page's record is written)."""
    store = ctx.store(crawl_id)
    if store is None:  # the crawl expired: nothing to note it in
        return
    record = {"url": url, "depth": depth, "error": None, "extract_error": error}
    store.ledger.dead_letter(url, record)
    store.client.hincrby(store.ck.stats, Counter.EXTRACT_ERRORS.value, 1)
    log.warning("crawl %s: %s on %.300s", crawl_id, error, url)


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
