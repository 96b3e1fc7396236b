"""Pacing beyond one host's own bucket: limits per server address and AutoThrottle.

Per address (``ip_rate`` req/s, ``ip_concurrency`` in flight, all hosts on one address
together; web/addresses.py says which are exempt). A host's address is the one the SSRF
guard resolves and pins: the fetch reports the address it used and done.lua stores it in the
host's state hash with an expiry (``ip``, ``ip_until``: ADDRESS_TTL, on Redis's clock), so
every process agrees; a host whose address is unknown or expired is resolved by the
dispatcher (worker/runtime/addresses.py) before it is released, so even its first request counts
against its address. release.lua then takes a token of the address's bucket and a lease of
its leases with the host's, atomically; and the address has a send gate beside the host's
(gate_lib.lua, in start.lua's round trip), so queueing delays after the release cannot bring
two of its requests closer than its interval.

Where the address's state lives: in the host's partition (``P:{C/N}:ip:A``, ``ipl:A``,
``ipw:A``), because a Lua call touches one hash slot. A crawl on one partition (any
standalone Redis) therefore paces an address exactly. With P partitions (a Redis Cluster),
the hosts of one address may sit in several: each partition paces the address at
``ip_rate / P`` and ``max(1, ip_concurrency // P)`` in flight, so the sum never exceeds
``ip_rate`` (an address whose hosts are all in one partition gets only 1/P of it: the limit
errs on the polite side; ``ip_concurrency`` below P is exceeded up to P).

AutoThrottle (``autothrottle``, Scrapy's rule, decided by done.lua so every process paces a
host alike): each response's latency (send to headers, measured in the fetch, never queue
time) gives a target delay latency / ``autothrottle_target``; the host's delay moves half way
to it, bounded below by the host's interval from its rate (Crawl-delay, slow-down) and above
by AUTOTHROTTLE_MAX_DELAY. A non-2xx answer may raise the delay, never lower it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..web.addresses import Exempt


class CrawlOptions(Protocol):
    """The options pacing is built from (state/options.py CrawlOptions, which imports this
    module to check them: named by the fields read, so the two do not import each other)."""

    @property
    def rate(self) -> float: ...
    @property
    def ip_rate(self) -> float: ...
    @property
    def ip_concurrency(self) -> int: ...
    @property
    def ip_exempt(self) -> tuple[str, ...]: ...
    @property
    def autothrottle(self) -> bool: ...
    @property
    def autothrottle_target(self) -> float: ...


#: Seconds a host -> address mapping is trusted (a DNS answer's usual life); a fetch renews it.
ADDRESS_TTL = 300.0
#: Seconds a host whose address could not be resolved goes ungrouped before it is asked again.
UNRESOLVED_TTL = 60.0
#: AutoThrottle's upper bound on a host's delay, seconds (Scrapy's AUTOTHROTTLE_MAX_DELAY).
AUTOTHROTTLE_MAX_DELAY = 60.0


def check_pacing(o: CrawlOptions) -> None:
    """ip_exempt, refused when it names no network or host suffix. (ip_rate, ip_concurrency
    and autothrottle_target have declared ranges, checked before: options.OWN_LIMITS and
    limits.limited.)"""
    Exempt(o.ip_exempt)


def address_limits(ip_rate: float, ip_concurrency: int, partitions: int) -> tuple[float, int]:
    """(seconds between two requests to one address, in flight) for one partition's
    release.lua; 0 = no such limit ((0, 0): hosts are not grouped by address)."""
    p = max(1, partitions)
    interval = p / ip_rate if ip_rate > 0 else 0.0
    return interval, (max(1, ip_concurrency // p) if ip_concurrency > 0 else 0)


class Answer(NamedTuple):
    """What done.lua learns from a response besides its outcome: the address it came from
    ("" unknown), seconds from send to headers (-1 unknown), and whether it was a 2xx."""

    ip: str = ""
    latency: float = -1.0
    ok: bool = False


@dataclass(frozen=True)
class Pacing:
    """One crawl's address limits and AutoThrottle, as Politeness hands them to done.lua."""

    rate: float = math.inf  # the crawl's default rate, req/s (for explain)
    ip_rate: float = 0.0
    address_interval: float = 0.0  # per partition (address_limits)
    address_concurrency: int = 0
    exempt: Exempt = field(default_factory=Exempt)
    autothrottle_target: float = 0.0  # 0: off

    @classmethod
    def of(cls, o: CrawlOptions, partitions: int) -> Pacing:
        interval, conc = address_limits(o.ip_rate, o.ip_concurrency, partitions)
        target = o.autothrottle_target if o.autothrottle else 0.0
        return cls(o.rate, o.ip_rate, interval, conc, Exempt(o.ip_exempt), target)

    @property
    def grouped(self) -> bool:
        """Are hosts paced together by server address?"""
        return self.address_interval > 0 or self.address_concurrency > 0


#: No response (an error before headers, a take-back): nothing learnt.
NO_ANSWER = Answer()


def explain(info: dict[str, Any], p: Pacing, now: float) -> list[str]:
    """Why a host goes at its pace, in words (``status``, ``Crawl.domains()``, the dashboard's
    host table): every limit that applies to it now, from :func:`domain_pace._describe`'s
    fields. The interval itself is ``info["interval"]`` (the last release's)."""
    why = [_rate_source(info, p.rate)]
    if info.get("crawl_delay") and not info.get("override"):
        why.append(f"Crawl-delay {info['crawl_delay']:g} s")
    if (info.get("slowdown") or 1.0) > 1.0:
        why.append(f"slowed x{info['slowdown']:.2f} after 429/503/errors")
    nb = info.get("not_before")
    if info.get("down_since") is not None:
        why.append(f"circuit open since {_clock(info['down_since'])}")
    elif nb and nb > now:
        why.append(f"Retry-After until {_clock(nb)}")
    if info.get("ceiling"):
        why.append(f"shared ceiling {info['ceiling']:g}/s (all crawls)")
    if info.get("address_group"):
        conc = f", {p.address_concurrency} in flight" if p.address_concurrency else ""
        rate = f"{p.ip_rate:g}/s" if p.ip_rate > 0 else "no rate"
        why.append(f"address group {info['address_group']} ({rate}{conc}, all its hosts)")
    elif info.get("address_exempt"):
        why.append(f"address {info['address']} exempt (ip_exempt)")
    at, lat = info.get("autothrottle_delay"), info.get("latency")
    if at is not None and lat is not None and p.autothrottle_target > 0:
        why.append(f"autothrottle: latency {lat:.2f} s -> delay {at:.2f} s")
    return why


def _rate_source(info: dict[str, Any], rate: float) -> str:
    if info.get("override"):
        own = float(info["override"])
        return "owner's rate: no limit" if math.isinf(own) else f"owner's rate {own:g}/s"
    if info.get("cluster_rate"):
        return f"set-rate {info['cluster_rate']}/s (all crawls)"
    return "no rate limit" if math.isinf(rate) else f"rate {rate:g}/s (crawl default)"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
