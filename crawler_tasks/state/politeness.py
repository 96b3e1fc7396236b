"""Cluster-wide politeness: how hard any domain is hit, whichever worker fetches it.

The decisions are made in Redis, on Redis's clock, by release.lua (token bucket + leases) and
done.lua (adaptive back-off); this module feeds them:

* rate: ``crawler set-rate DOMAIN RATE`` (cluster-wide, all crawls), the crawl's ``rate``
  default, and the crawl owner's ``rates={host: r}`` which replace both (``inf`` = no limit and
  no Crawl-delay, for people crawling their own sites);
* robots.txt ``Crawl-delay`` (capped by ``max_crawl_delay``) lowers the rate to 1/delay;
* 429/503 halve the pace and honour ``Retry-After``; timeouts and 5xx slow it by half again;
  each success recovers 20 % of the slow-down, up to the configured rate;
* at most ``concurrency`` requests per domain are in flight (leases expire after
  ``lease_seconds``, so a killed worker never blocks a host).

Where the token is taken: release.lua charges the bucket when it releases a URL, so nothing is
published before its token and no task ever waits for one. But the request starts later, after
a queueing delay that varies (a cold worker thread, a busy dispatcher), and charging only at
release let a late request bunch up with the next one: 5 requests in a 1-s window at 2 req/s
with burst 1. So done.lua, when the request has ended and returns its lease, charges it
again from the moment it was *sent* (the fetcher notes when its first request had been
written: ``Response.sent_at``): tat >= sent + interval. With ``concurrency=1`` the next request
is released only after that, and no earlier than tat - burst x interval, so the sends form a
GCRA sequence whatever the queueing delays: no window of W seconds holds more than ``rate x W
+ burst`` of them (for a Crawl-delay d, which has no burst: one request per d seconds), and
the gap between two requests is the interval, as Scrapy paces (it counts the delay from each
request's start). Pacing from the *end* of each request, as this crawler did before, added
the response time to that gap whenever the burst's slack did not cover it (always with no
burst). A request that failed (timeout, 5xx, 429), or whose send time is unknown, is paced
from its end (tat >= end + interval): a host that struggles gets its whole interval of rest.
robots.txt requests are charged too (:meth:`Politeness.extra_request`): a server's load is
every request it gets. A URL robots.txt disallows gives its token back
(its lease ends ``refund``: :class:`Lease`) and leaves the host's slow-down and circuit
breaker alone. With a higher ``concurrency``, requests released together can still drift
relative to each other by their queueing delays.

Known limits: the robots.txt request and the page that needed it go back to back (the
Crawl-delay is unknown until robots.txt is read). For a new host with ``burst >= 1`` that is
within the burst; with ``burst=0``, or when robots.txt is fetched again mid-crawl (cache
expiry, several hosts in one ``registered_domain`` bucket), it is one request over, paid back
by delaying the next. Redirect hops the fetcher follows (pages and robots.txt alike) are
requests the bucket does not see. Buckets are per crawl: two crawls of one host each get its
rate (``crawler set-rate`` lowers it for all of them).

Celery's per-task ``rate_limit`` (``CRAWLER_FETCH_RATE_LIMIT``) is applied per worker process
and is only a bandwidth cap, not politeness.

Each domain's pace as ``crawler status`` and the dashboard show it (the per-host reads):
``domain_pace.py``.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, NamedTuple

import redis

from . import domain_pace, formats
from .formats import LeaseEnd
from .keys import CrawlKeys, Keys
from .pacing import (
    ADDRESS_TTL,
    AUTOTHROTTLE_MAX_DELAY,
    NO_ANSWER,
    UNRESOLVED_TTL,
    Answer,
    Pacing,
)
from .scripts import Call, Scripts

log = logging.getLogger(__name__)

#: Largest slow-down factor adaptive back-off reaches (1 req/s becomes 1 req / 32 s).
MAX_SLOWDOWN = 32.0


def parse_retry_after(value: str | None, cap: float, now: float | None = None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), capped."""
    if not value:
        return 0.0
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return 0.0
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return 0.0
    return max(0.0, min(seconds, cap))


def set_rate(client: redis.Redis, keys: Keys, domain: str, rate: float | None) -> None:
    """Cluster-wide rate for ``domain`` in requests/s (None removes it)."""
    if rate is None:
        client.hdel(keys.rates, domain)
    elif not rate > 0:
        raise ValueError("rate must be > 0")
    else:
        client.hset(keys.rates, domain, "inf" if math.isinf(rate) else repr(rate))


def cluster_rates(client: redis.Redis, keys: Keys) -> str:
    """The ``set_rate`` overrides as release.lua takes them: "domain<TAB>rate" pairs joined by
    tabs. An argument rather than a key, so that release.lua touches only its crawl's slot."""
    pairs = client.hgetall(keys.rates)
    return "\t".join(f"{k.decode()}\t{v.decode()}" for k, v in pairs.items())


class Politeness:
    """One crawl's side of the per-domain buckets and leases (release.lua charges them)."""

    def __init__(
        self,
        client: redis.Redis,
        ck: CrawlKeys,
        scripts: Scripts,
        max_crawl_delay: float,
        max_host_outage: float = 120.0,
        owner_rates: Mapping[str, float] | None = None,
        pacing: Pacing | None = None,
    ) -> None:
        self.client = client
        self.ck = ck
        #: The crawl's own rates (state/crawl_rates.py), for ``domains`` and subrequests.
        self.owner_rates = owner_rates if owner_rates is not None else {}
        self.scripts = scripts
        self.max_crawl_delay = max_crawl_delay
        self.max_host_outage = max_host_outage
        #: Limits per server address and AutoThrottle (state/pacing.py).
        self.pacing = pacing or Pacing()

    def lease(self, url: str, domain: str, keep_on: tuple[type[BaseException], ...] = ()) -> Lease:
        """The lease release.lua took for ``url``, to be returned exactly once (see
        :class:`Lease`)."""
        return Lease(self, url, domain, keep_on)

    def drain(self, domain: str) -> list[tuple[int, str]]:
        """A dead host's pending (depth, url), taken out of the frontier as in flight."""
        pk = self.ck.for_domain(domain)
        keys = [pk.inflight, pk.ready, pk.stats]
        args = [pk.queue(domain), domain, pk.spill(domain)]
        raw = self.scripts.drain(keys=keys, args=args, client=self.client)
        return [formats.parse_entry(e.decode("utf-8", "surrogateescape")) for e in raw]

    def _done(
        self,
        url: str,
        domain: str,
        end: LeaseEnd,
        retry_after: float = 0.0,
        sent_at: float | None = None,
        answer: Answer = NO_ANSWER,
    ) -> Done:
        """done.lua: return the lease of ``url`` and pace the next request, from when it was
        sent, at ``sent_at`` (time.monotonic()), if it went well; from now if it failed or if
        ``sent_at`` is unknown (None); ``answer``: the response's address and latency (address
        groups, AutoThrottle). Private: a task returns a lease once, through :class:`Lease`
        (its only caller besides :meth:`extra_request`), so done.lua runs once per lease."""
        call = self._done_call(url, domain, end, retry_after, sent_at, answer)
        return Done.parse(call.script(keys=call.keys, args=call.args, client=self.client))

    def _done_call(
        self,
        url: str,
        domain: str,
        end: LeaseEnd,
        retry_after: float,
        sent_at: float | None,
        answer: Answer,
    ) -> Call:
        """:meth:`_done`'s script call, not sent (:meth:`Lease.handoff`). How long ago the
        request was sent is read as the call is made: done.lua paces from Redis's own clock."""
        sent = -1.0 if sent_at is None else time.monotonic() - sent_at
        pk, p = self.ck.for_domain(domain), self.pacing
        exempt = 1 if answer.ip and p.exempt.covers(domain, answer.ip) else 0
        args = [
            url,
            domain,
            str(end),
            retry_after,
            MAX_SLOWDOWN,
            self.max_host_outage,
            sent,
            answer.ip,
            exempt,
            answer.latency,
            1 if answer.ok else 0,
            p.autothrottle_target,
            AUTOTHROTTLE_MAX_DELAY,
            ADDRESS_TTL,
            pk.address_prefix if p.grouped else "",
            p.address_interval,
        ]
        keys = [pk.ready, pk.lease(domain), pk.domain(domain), pk.queue(domain)]
        return Call(self.scripts.done, keys, args)

    def set_address(self, domain: str, ip: str | None) -> None:
        """The server address the dispatcher resolved for ``domain`` (None: it could not):
        stored for ADDRESS_TTL, and the domain woken (address.lua)."""
        pk = self.ck.for_domain(domain)
        exempt = 1 if ip and self.pacing.exempt.covers(domain, ip) else 0
        ttl = ADDRESS_TTL if ip else UNRESOLVED_TTL
        args = [domain, ip or "?", exempt, ttl]
        self.scripts.address(keys=[pk.ready, pk.domain(domain)], args=args, client=self.client)

    def extra_request(self, domain: str) -> None:
        """A request the release did not pay for (robots.txt) has just ended: charge it."""
        self._done("", domain, LeaseEnd.EXTRA)

    def subrequest(self, domain: str, rate: float, burst: int) -> float:
        """A browser subrequest to ``domain`` (subrequest.lua): 0 when its token is taken (send
        it now), else the seconds to wait before asking again. ``rate``: the crawl's default,
        replaced, as release.lua does, by the owner's rate or ``crawler set-rate``'s."""
        own = self.owner_rates.get(domain)
        if own is None:
            cluster = self.client.hget(self.ck.cluster_rates, domain)
            rate = float(cluster) if cluster else rate
        else:
            rate = own
        base = 1 / rate if 0 < rate < math.inf else 0.0
        grouped = self.ck.for_domain(domain).address_prefix if self.pacing.grouped else ""
        args = [repr(base), burst, 0 if own is None else 1, grouped]
        keys = [self.ck.domain(domain)]
        return float(self.scripts.subrequest(keys=keys, args=args, client=self.client))

    def set_crawl_delay(self, domain: str, delay: float | None) -> None:
        """robots.txt's Crawl-delay, capped by ``max_crawl_delay``: applies from the end of the
        current request (done.lua), then between the starts of the next ones (release.lua,
        start.lua)."""
        if delay and delay > 0:
            capped = min(delay, self.max_crawl_delay)
            self.client.hset(self.ck.domain(domain), "delay", repr(capped))

    def domains(
        self,
        names: list[str],
        cluster_rates: dict[bytes, bytes] | None = None,
        ceilings: dict[str, float] | None = None,
    ) -> list[dict[str, Any]]:
        """Current pace of each domain: effective req/s, slow-down, pending, in flight, its
        interval and why (``why``: pacing.explain). ``cluster_rates``: the ``set-rate`` hash
        read once by a caller asking about many domains (the dashboard's host table), instead
        of one HGET per domain; ``ceilings``: the shared ceilings (``ceilings.read``)."""
        return domain_pace.domains(
            self.client, self.ck, self.owner_rates, self.pacing, names, cluster_rates, ceilings
        )


class Done(NamedTuple):
    """done.lua's reply: the slow-down factor; after ``down``, the seconds the host has been
    down while its circuit is open (-1 when it is not) and whether it was declared dead now."""

    slow: float
    down_for: float = -1.0
    dead: bool = False

    @staticmethod
    def parse(raw: Any) -> Done:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        slow, down_for, dead = (text.split("|") + ["-1", "0"])[:3]
        return Done(float(slow), float(down_for), dead == "1")


class Lease:
    """The lease of one released URL (release.lua took it), returned exactly once.

    A fetch that forgets to return its lease leaves the host waiting for the lease's expiry
    (``lease_seconds``), so the return is not left to each branch: :meth:`release` returns it
    the first time and does nothing after, and leaving a ``with`` block with the lease still
    held returns it as an ``error`` (also when an exception leaves the block). An exception of
    ``keep_on`` (Redis being away: the task runs again and its rerun returns the lease) keeps
    it, as does :meth:`disown` for a lease that is not this task's (a duplicate delivery)."""

    def __init__(
        self,
        politeness: Politeness,
        url: str,
        domain: str,
        keep_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.politeness = politeness
        self.url = url
        self.domain = domain
        self.keep_on = keep_on
        #: How it ended (None while it is held, or when it was not this task's).
        self.ended: LeaseEnd | None = None
        self.held = True

    def release(
        self,
        end: LeaseEnd,
        retry_after: float = 0.0,
        sent_at: float | None = None,
        answer: Answer = NO_ANSWER,
    ) -> Done:
        """Return the lease (done.lua with ``end``) unless it was returned already; done.lua's
        reply, or a neutral one for a second call. ``sent_at``: when the request was sent
        (time.monotonic(), None: unknown); ``answer``: the response's address and latency
        (state/pacing.py)."""
        if not self.held:
            return Done(1.0)
        self.held, self.ended = False, end
        return self.politeness._done(self.url, self.domain, end, retry_after, sent_at, answer)

    def handoff(
        self, end: LeaseEnd, retry_after: float, sent_at: float | None, answer: Answer
    ) -> Call:
        """:meth:`release`'s done.lua call, not sent: the caller sends it with its own (one
        round trip). The lease counts as returned from now on."""
        self.held, self.ended = False, end
        return self.politeness._done_call(self.url, self.domain, end, retry_after, sent_at, answer)

    def disown(self) -> None:
        """Not this task's to return (start.lua says another delivery holds the URL)."""
        self.held = False

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.held or isinstance(exc, self.keep_on):
            return
        if exc is None:
            self.release(LeaseEnd.ERROR)
            return
        try:  # the exception that left the block is the one to report, not this one
            self.release(LeaseEnd.ERROR)
        except Exception:
            log.warning("the lease of %.300s could not be returned", self.url, exc_info=True)
