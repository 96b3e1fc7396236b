"""The fetch step of one released URL: what start.lua, robots.txt and the request say of it,
as a :class:`~crawler_tasks.worker.visit.outcome.Decision` (what becomes of the URL, how the
host's lease ends, and what is to be written of what the step found). Nothing here returns
the lease, records the URL or writes what it found: ``settle`` does, once, whatever the
branch: a page's response (respond.py), a sitemap file (sitemap_seeds.used), a page not due
(adaptive.skipped), an origin's sitemaps (sitemap_seeds.discover), the counters and notes.

What the step sends while its host's lease is held is the request (robots.txt's, then the
page's or sitemap's) and what belongs to it: the page's ``request_started`` (announced by the
crawl's runtime as it sends), and robots.txt's politeness: its own request charged to the
host (done.lua "extra") and its Crawl-delay, applied at once, as today: release.lua and
done.lua pace the host by it, and written after the lease a release of the host's next URL
(``concurrency`` > 1) could come before it at the crawl's own rate.

Redirect hops are followed by the fetcher; each target is scope-checked and marked seen by
admission's claims (a target already seen stops the chain: ``redirect_duplicate``; out of
scope: ``redirect_out_of_scope``). The targets a URL marked are remembered, so a retry or a
replay of that URL (``retry-failed``) follows them again instead of stopping at its own marks.

A failure to connect at all (:class:`~crawler_tasks.errors.Unreachable`) is what a host outage
looks like: its lease ends ``down`` and the host's circuit breaker decides (settle.py).
"""

from __future__ import annotations

from ...errors import (
    HostDown,
    PermanentError,
    RetryableError,
    ServerError,
    TLSError,
    Unreachable,
)
from ...state import formats
from ...state.crawl_state import Note
from ...state.formats import Begun, Counter, LeaseEnd, Outcome, Started
from ...state.pacing import Answer
from ...state.politeness import parse_retry_after
from ...web.fetcher import Response
from ...web.robots import Robots
from ...web.urls import origin_of
from ..runtime.send_gate import SendSlot
from . import sitemap_seeds
from .adaptive import not_due
from .outcome import Decision, Final, Next
from .trip import Visit

THROTTLE_STATUSES = {429, 503}


def decide(visit: Visit, begun: Begun | None) -> Decision:
    """What becomes of the visit's URL; ``begun``: start.lua's word on it if already asked."""
    ctx, store, url, depth = visit.ctx, visit.store, visit.url, visit.depth
    if begun is None:
        begun = store.ledger.start_many([url], ctx.worker_id)[url]
    started = Started(begun.code)
    if started is Started.DUPLICATE:
        return Decision(Next.DUPLICATE, lease=None)
    if started is Started.UNRECORDED:  # the process that finished it died before its record
        return Decision(Next.RECOVER, lease=None)
    if started is Started.CANCELLED:
        return Decision.record(Final.cancelled(url, depth))
    domain = visit.domain
    if started is Started.HOST_DEAD:  # declared dead in this crawl: no request
        down = Final.failed(url, depth, HostDown(f"{domain} is down"))
        return Decision.record(down, LeaseEnd.REFUND)
    slot = SendSlot.of(store, url, domain, ctx.worker_id, begun, ctx.ceilings)
    if slot is None:  # held up so long that another process fetches it now
        return Decision(Next.DUPLICATE, lease=None)
    with ctx.fetcher.gated(slot.wait):
        robots = _robots(visit)
        if isinstance(robots, Decision):
            return robots
        # An origin's sitemaps, the first time this process reads its robots.txt: admitted
        # after the lease, whatever becomes of this URL (sitemap_seeds.py).
        origin, listed = origin_of(url), None
        if robots is not None and store.opts.sitemaps:
            listed = sitemap_seeds.found(visit, origin, robots)
        decision = _request(visit, begun, listed)
    if listed is not None:
        decision.sitemaps = (origin, listed)
    return decision


def _request(visit: Visit, begun: Begun, listed: list[str] | None) -> Decision:
    """A URL robots.txt allows: a sitemap file (``listed``: its origin's, if read just now),
    an adaptive schedule's page not due (issue 35, asked after robots.txt), or a page,
    requested."""
    store, url, depth = visit.store, visit.url, visit.depth
    if store.opts.sitemaps and sitemap_seeds.is_sitemap(visit, listed):
        return sitemap_seeds.fetch(visit)
    skipped = not_due(visit) if store.recrawl is not None else None  # a schedule's run only
    if skipped is not None:
        return skipped
    conditional = store.recrawl.conditional_headers(url) if store.recrawl else {}
    try:
        follow = store.admission.claims(url).follow
        response = visit.runtime.fetch(url, follow, conditional)
    except Unreachable as exc:
        return Decision(Next.UNREACHABLE, LeaseEnd.DOWN, error=exc)
    except RetryableError as exc:  # connected, then failed: the URL's own problem
        return Decision.retry(exc)
    except PermanentError as exc:
        failed = Decision.record(Final.failed(url, depth, exc))
        if isinstance(exc, TLSError):
            failed.notes.update(tls_note(url, str(exc)))
        return failed
    return _answered(visit, response, begun.awaited)


def _answered(visit: Visit, response: Response, awaited: bool) -> Decision:
    """A response: the lease ends by its status; 5xx, 408 and 429 are retried. ``awaited``:
    the host's next URL waits for this lease (start.lua: settle.py returns it first)."""
    status = response.status
    retry_after = parse_retry_after(
        response.headers.get("retry-after"), visit.ctx.settings.max_retry_after
    )
    if status in THROTTLE_STATUSES:
        decision = Decision(Next.RETRY, LeaseEnd.THROTTLE, retry_after=retry_after)
    elif status >= 500:
        decision = Decision(Next.RETRY, LeaseEnd.ERROR)
    else:  # paced from when the request was sent (politeness.py)
        decision = Decision(Next.RESPONSE, sent_at=response.sent_at, awaited=awaited)
    latency = -1.0 if response.latency is None else response.latency
    decision.answer = Answer(response.ip or "", latency, 200 <= status < 300)
    if status >= 500 or status in (408, 429):
        # Counted now: the URL's final record (a retry's, or a failure) will not carry it.
        decision.counters[formats.status_code(status)] = 1
        decision.next, decision.error = Next.RETRY, ServerError(status, retry_after)
    else:
        decision.response = response  # what it becomes: settle (respond.py)
    return decision


def tls_note(url: str, why: str) -> dict[Note, str]:
    """The crawl's first TLS failure, named in ``status`` and the summary (a private CA the
    workers were not given is the usual cause: the hint is in the summary)."""
    return {Note.TLS_ERROR_WHY: f"{origin_of(url)}: {TLSError.reason}: {why}"}


def _robots(visit: Visit) -> Decision | Robots | None:
    """What robots.txt says of the URL, for a crawl that obeys it or reads its sitemaps (None
    for the others): a Decision when it is not to be fetched, else the origin's rules; and
    the politeness accounting of this fetch (see ``politeness``): robots.txt, when it had to
    be requested, is charged to the domain's bucket; its Crawl-delay is applied before the
    page's request (see the module's doc)."""
    opts, url, domain = visit.store.opts, visit.url, visit.domain
    if not (opts.obey_robots or opts.sitemaps):
        return None
    polite = visit.store.politeness
    robots = visit.runtime.robots.get(origin_of(url), lambda: polite.extra_request(domain))
    if opts.obey_robots:
        if not robots.allowed(opts.robots_agent, url):
            return _refused(visit, robots)
        polite.set_crawl_delay(domain, robots.crawl_delay(opts.robots_agent))
    return robots


def _refused(visit: Visit, robots: Robots) -> Decision:
    """A URL robots.txt refuses: unreadable for TLS (the page's own handshake would fail the
    same way), unreachable (a disallow-all policy only comes from a robots.txt that could not
    be read), or disallowed. Its lease ends ``refund`` (its token back, the host's slow-down
    and circuit untouched: no request was sent)."""
    url, depth, origin, why = visit.url, visit.depth, origin_of(visit.url), robots.why
    tls = _tls_why(why)
    if tls is not None:
        final = Final.failed(url, depth, TLSError(tls))
        final.extra["detail"] = f"robots.txt: {TLSError.reason}: {tls}"
        refused = Decision.record(final, LeaseEnd.REFUND)
        refused.notes.update(tls_note(url, tls))
        return refused
    unreachable = robots.kind == "disallow"
    reason = (Outcome.ROBOTS_UNREACHABLE if unreachable else Outcome.ROBOTS_DISALLOWED).value
    counter = Counter.ROBOTS_UNREACHABLE if unreachable else Counter.ROBOTS_DISALLOWED
    final = Final(url, 0, error=reason, counters={counter.value: 1}, recorded=unreachable)
    refused = Decision.record(final, LeaseEnd.REFUND)
    if unreachable:  # why it could not be read: a TLS or connection failure, a 5xx
        final.extra["detail"] = f"robots.txt: {why or 'unreachable'}"
        refused.notes[Note.ROBOTS_UNREACHABLE_WHY] = f"{origin}: {why}"
    return refused


def _tls_why(robots_why: str) -> str | None:
    """The TLS failure that made robots.txt unreadable (robots_getter's "tls_error: ...")."""
    head, sep, why = robots_why.partition(": ")
    return why if sep and head == TLSError.reason else None
