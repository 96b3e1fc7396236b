"""One place settles a fetched URL: its lease is returned, then the URL is finalized or put
back in the frontier.

The fetch step (fetch_step.py) only *decides*: it returns a :class:`Decision` (what becomes
of the URL, and how the host's lease ends), and :func:`settle` carries it out in one order
for every branch: lease first (the host's next request waits for it), then the URL. A new
branch is a new Decision, never a new pair of calls to remember, and the lease is a
:class:`~crawler_tasks.state.politeness.Lease`: returned once, whatever happens (an
exception that leaves its ``with`` block returns it as an error). As arq decides a job's
outcome first and commits it once, and Scrapy's engine frees a slot in one place.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..errors import CrawlerError, HostDown
from ..state.formats import LeaseEnd
from ..state.pacing import NO_ANSWER, Answer
from ..state.politeness import Done, Lease
from ..state.store import CrawlStore
from .context import Context
from .recorder import Final, finalize, recover

log = logging.getLogger(__name__)


class Next(Enum):
    """What becomes of a URL once its lease is returned."""

    DUPLICATE = "duplicate"  # not this task's (start.lua): nothing to do, no lease to return
    RECOVER = "recover"  # final already, its record unwritten: write it (no lease)
    FINAL = "final"  # record ``final``
    RETRY = "retry"  # back to the frontier after a back-off, or final after max_retries
    REQUEUE = "requeue"  # back to the frontier now, no retry spent
    UNREACHABLE = "unreachable"  # no connection: the host's circuit breaker decides (done.lua)
    RESPONSE = "response"  # a response: ``then`` records it or hands it to the parse step


@dataclass
class Decision:
    """What the fetch step decided for one URL, for :func:`settle` to carry out."""

    next: Next
    #: How the lease ends (None: the URL is not this task's, its lease is not ours either).
    lease: LeaseEnd | None = LeaseEnd.OK
    final: Final | None = None
    error: CrawlerError | None = None
    #: Retry-After seconds for the lease (a throttled host), and when the request was sent.
    retry_after: float = 0.0
    sent: float = -1.0
    #: The response's address and latency, for the host's address group and AutoThrottle.
    answer: Answer = NO_ANSWER
    #: RESPONSE: what the response becomes, after the lease is back (None: a parse task).
    then: Callable[[], Final | None] | None = None

    @classmethod
    def record(cls, final: Final, lease: LeaseEnd = LeaseEnd.OK) -> Decision:
        return cls(Next.FINAL, lease, final=final)

    @classmethod
    def retry(cls, exc: CrawlerError, lease: LeaseEnd = LeaseEnd.ERROR) -> Decision:
        return cls(Next.RETRY, lease, error=exc)


def settle(
    ctx: Context, store: CrawlStore, url: str, depth: int, decision: Decision, lease: Lease | None
) -> str:
    """Return the lease as ``decision`` says, then finalize or requeue the URL; returns what
    happened (for logs and tests)."""
    reply = Done(1.0)
    if lease is not None:
        if decision.lease is None:
            lease.disown()
        else:
            reply = lease.release(
                decision.lease, decision.retry_after, decision.sent, decision.answer
            )
    match decision.next:
        case Next.DUPLICATE:
            return "duplicate"
        case Next.RECOVER:
            return recover(ctx, store, url)
        case Next.RETRY:
            assert decision.error is not None
            return retry_or_fail(ctx, store, url, depth, decision.error)
        case Next.REQUEUE:
            return requeue(store, url, depth, 0.0)
        case Next.UNREACHABLE:
            assert decision.error is not None
            return _unreachable(ctx, store, url, depth, decision.error, reply)
        case Next.RESPONSE:
            assert decision.then is not None
            final = decision.then()
            return "fetched" if final is None else finalize(ctx, store, final)
    assert decision.final is not None
    return finalize(ctx, store, decision.final)


def _unreachable(
    ctx: Context, store: CrawlStore, url: str, depth: int, exc: CrawlerError, down: Done
) -> str:
    """The host could not be connected to; ``down`` is done.lua's verdict on the host."""
    if down.dead:
        final = Final.failed(url, depth, exc)
        final.extra["attempts"] = store.ledger.count_attempt(url)
        result = finalize(ctx, store, final)
        _fail_dead_host(ctx, store, store.domain_of(url))
        return result
    if down.down_for >= 0:
        # The whole host is down (circuit open): the URL waits for it, its retries spared.
        return requeue(store, url, depth, 0.0)
    return retry_or_fail(ctx, store, url, depth, exc)


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
    return requeue(store, url, depth, delay)


def _fail_dead_host(ctx: Context, store: CrawlStore, domain: str) -> None:
    """Every pending URL of a host declared dead gets its final state now, unrequested."""
    down = HostDown(f"{domain} down for {store.opts.max_host_outage:g}s or more")
    pending = store.politeness.drain(domain)
    for depth, url in pending:
        finalize(ctx, store, Final.failed(url, depth, down))
    log.warning("crawl %s: %s is down; %d pending URLs failed", store.id, domain, len(pending))


def requeue(store: CrawlStore, url: str, depth: int, delay: float) -> str:
    requeued = store.ledger.requeue(store.domain_of(url), depth, url, delay)
    return "retry" if requeued else "duplicate"
