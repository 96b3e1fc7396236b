"""One place settles a fetched URL: its lease is returned, then the URL is finalized or put
back in the frontier.

The fetch step (fetch_step.py) only *decides*: it returns a :class:`Decision` (what becomes
of the URL, how the host's lease ends, and what it found), and :func:`settle` carries it out
in one order for every branch: lease first (the host's next request waits for it), then what
the step found is written (counters, notes, an origin's sitemaps; a page's response, a
sitemap file, a page not due: respond.py, sitemap_seeds.py, adaptive.py), then the URL; a
response's lease goes with its URL's finish, in one round trip, unless the host waits for
that very slot on a process with free threads: then at once (``_responded``). A new
branch is a new Decision, never a new pair of calls to remember, and the lease is a
:class:`~crawler_tasks.state.politeness.Lease`: returned once, whatever happens (an
exception that leaves its ``with`` block returns it as an error). As arq decides a job's
outcome first and commits it once, and Scrapy's engine frees a slot in one place.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from functools import partial
from typing import NamedTuple

from ...errors import CrawlerError, HostDown
from ...state.politeness import Done, Lease
from ...state.store import CrawlStore
from ..process.liveness import pool_has_room
from .adaptive import skipped
from .outcome import Decision, Final, Next
from .recorder import finalize, recover
from .respond import respond
from .sitemap_seeds import discover, used
from .trip import Visit

log = logging.getLogger(__name__)


def settle(visit: Visit, decision: Decision, lease: Lease | None) -> str:
    """Return the lease as ``decision`` says, then finalize or requeue the URL; returns what
    happened (for logs and tests)."""
    reply = Done(1.0)
    if decision.next is Next.RESPONSE and lease is not None and decision.lease is not None:
        return _responded(visit, decision, lease)
    if lease is not None:
        if decision.lease is None:
            lease.disown()
        else:
            reply = lease.release(
                decision.lease, decision.retry_after, decision.sent_at, decision.answer
            )
    _found(visit, decision)
    match decision.next:
        case Next.DUPLICATE:
            return "duplicate"
        case Next.RECOVER:
            return recover(visit)
        case Next.RETRY:
            assert decision.error is not None
            return retry_or_fail(visit, decision.error)
        case Next.REQUEUE:
            return requeue(visit, 0.0)
        case Next.UNREACHABLE:
            assert decision.error is not None
            return _unreachable(visit, decision.error, reply)
    final = _final(visit, decision)
    return "fetched" if final is None else finalize(visit, final)


def _final(visit: Visit, decision: Decision) -> Final | None:
    """The URL's final state: as decided, or what the response, the sitemap file or the page
    not due that the step found becomes once written (None: a parse or render task's)."""
    match decision.next:
        case Next.RESPONSE:
            assert decision.response is not None
            return respond(visit, decision.response)
        case Next.SITEMAP:
            assert decision.response is not None
            return used(visit, decision.response)
        case Next.NOT_DUE:
            assert decision.final is not None and decision.seen is not None
            return skipped(visit, decision.final, decision.seen)
    assert decision.final is not None
    return decision.final


def _responded(visit: Visit, decision: Decision, lease: Lease) -> str:
    """A response: what it becomes (respond.py), then its lease returned with the URL's
    finish in one round trip (done.lua, then finish.lua: issue 32). The lease is held while
    the page is parsed and its links admitted (milliseconds); the next request is paced from
    when this one was sent all the same (``sent`` counts the wait). A host whose next URL
    waits for a lease, not a token (release.lua's "aw"), gets this one back first, alone,
    where this process has free threads: held through the parse, the lease would leave fewer
    requests in flight than ``concurrency`` allows (Scrapy frees a download slot once the
    response is in); with the pool full, the CPU is the limit and the round trip is saved.
    If anything fails before the finish, the lease is returned alone, as decided (kept while
    Redis is away, as the lease's ``with`` keeps it), and the failure goes on. Either way
    the lease ends as decided, paced from the request's send (``sent_at``), read when its
    done.lua call is made."""
    response, end = decision.response, decision.lease
    assert response is not None and end is not None
    ending = (end, decision.retry_after, decision.sent_at, decision.answer)
    release = partial(lease.release, *ending)
    handoff = partial(lease.handoff, *ending)
    early = decision.awaited and pool_has_room()  # the host waits for this slot, not the CPU
    if early:
        release()
    try:
        _found(visit, decision)
        final = respond(visit, response, early)
        carried = handoff if lease.held else None
        result = "fetched" if final is None else finalize(visit, final, carried)
    except BaseException as exc:
        # As the lease's ``with`` would, but as decided: Redis being away keeps it (the
        # task's rerun returns it); anything else returns it now.
        if lease.held and not isinstance(exc, lease.keep_on):
            try:
                release()
            except Exception:  # the failure that got here is the one to report
                log.warning("the lease of %.300s could not be returned", lease.url, exc_info=True)
        raise
    if lease.held:  # parsed elsewhere, or not finished here
        release()
    return result


def _found(visit: Visit, decision: Decision) -> None:
    """What the deciding step found for the whole crawl: counters, first notes, and an
    origin's sitemap files (admitted whatever becomes of this URL)."""
    store = visit.store
    for name, n in decision.counters.items():
        store.stats.add(name, n)
    for name, text in decision.notes.items():
        store.lifecycle.first_note(name, text)
    if decision.sitemaps is not None:
        discover(visit, *decision.sitemaps)


def _unreachable(visit: Visit, exc: CrawlerError, down: Done) -> str:
    """The host could not be connected to; ``down`` is done.lua's verdict on the host."""
    if down.dead:
        result = finalize(visit, attempt(visit).failed(visit.url, visit.depth, exc))
        _fail_dead_host(visit)
        return result
    if down.down_for >= 0:
        # The whole host is down (circuit open): the URL waits for it, its retries spared.
        return requeue(visit, 0.0)
    return retry_or_fail(visit, exc)


class Attempt(NamedTuple):
    """One more attempt of a URL, counted: its number, and whether it was the last one."""

    number: int
    last: bool

    def failed(self, url: str, depth: int, exc: CrawlerError) -> Final:
        """The URL's failure after its last attempt (its record says how many it had)."""
        final = Final.failed(url, depth, exc)
        final.extra["attempts"] = self.number
        return final


def attempt(visit: Visit) -> Attempt:
    """The one retry rule of the fetch, render and repair paths: an attempt beyond
    ``max_retries`` makes the URL final, an earlier one tries again (each path its own way:
    a back-off in the frontier, a render published again, a URL taken back)."""
    number = visit.store.ledger.count_attempt(visit.url)
    return Attempt(number, number > visit.store.opts.max_retries)


#: Take-backs of one URL before it fails as ``worker_lost``: they spend no retry (a process
#: that was only stalled, by memory pressure or a paused VM, may be alive: the URL did nothing
#: wrong), so this only stops a URL that kills every worker that takes it.
MAX_TAKEBACKS = 5


def takeback(store: CrawlStore, url: str) -> Attempt:
    """The repair path's rule: a URL taken back from a silent worker counts a take-back, not
    an attempt; beyond :data:`MAX_TAKEBACKS` it is final."""
    number = store.ledger.count_takeback(url)
    return Attempt(number, number > MAX_TAKEBACKS)


def retry_or_fail(visit: Visit, exc: CrawlerError) -> str:
    opts, attempts = visit.store.opts, attempt(visit)
    if attempts.last:
        return finalize(visit, attempts.failed(visit.url, visit.depth, exc))
    base = opts.retry_backoff * 2 ** (attempts.number - 1)
    delay = random.uniform(0, min(base, opts.retry_backoff_max))  # full jitter
    delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
    return requeue(visit, delay)


def _fail_dead_host(visit: Visit) -> None:
    """Every pending URL of a host declared dead gets its final state now, unrequested."""
    store, domain = visit.store, visit.domain
    down = HostDown(f"{domain} down for {store.opts.max_host_outage:g}s or more")
    failed = 0
    for pending in store.frontier.tails.drain(domain, store.politeness.drain):  # chunks too
        for depth, url in pending:  # the host's own URLs: the visit's domain is theirs
            finalize(replace(visit, url=url, depth=depth), Final.failed(url, depth, down))
        failed += len(pending)
    log.warning("crawl %s: %s is down; %d pending URLs failed", store.id, domain, failed)


def requeue(visit: Visit, delay: float) -> str:
    """Back to the frontier, due in ``delay`` seconds ("duplicate": it was final already)."""
    requeued = visit.store.ledger.requeue(visit.domain, visit.depth, visit.url, delay)
    return "retry" if requeued else "duplicate"
