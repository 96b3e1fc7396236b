"""Every host of a crawl with its figures: the dashboard's host table.

A broad crawl has 100,000 hosts and more, so the table is read in pipelined chunks (never one
Lua script over all of them: that would hold Redis for the whole read while the crawl waits)
and sorted and paged by the reader (surface/dashboard_data.py keeps one snapshot per crawl for
a few seconds). The hosts listed are those with work: pending URLs (a partition's ``ready``
set) or URLs in flight (its ``inflight`` hash); a host whose URLs are all final has nothing to
hold the crawl back and is not listed.
"""

from __future__ import annotations

import math
from typing import Any

import redis

from .domain_pace import effective_rate
from .formats import Inflight
from .keys import CrawlKeys
from .politeness import Politeness

#: Hosts per pipelined round trip: ~4 commands each, a few ms of Redis per round trip.
CHUNK = 2000


def host_names(client: redis.Redis, ck: CrawlKeys) -> list[str]:
    """Hosts with pending URLs or URLs in flight, in every partition."""
    names: set[str] = set()
    for pk in ck.parts:
        names.update(_text(d) for d in client.zrange(pk.ready, 0, -1))
        names.update(Inflight.parse(_text(v)).domain for v in client.hvals(pk.inflight))
    return sorted(names)


def host_rows(
    politeness: Politeness, names: list[str], default_rate: float, ceilings: dict[str, float]
) -> list[dict[str, Any]]:
    """One row per host: backlog, in flight, effective rate, Crawl-delay, circuit state,
    connection failures in a row, the shared ceiling (``crawler set-ceiling``), the interval
    between its requests now and why (state/pacing.py ``explain``), its address group."""
    rows = []
    rates = politeness.client.hgetall(politeness.ck.cluster_rates)  # `crawler set-rate`, once
    for i in range(0, len(names), CHUNK):
        for info in politeness.domains(names[i : i + CHUNK], rates, ceilings):
            rate = effective_rate(info, default_rate)
            rows.append(
                {
                    "domain": info["domain"],
                    "pending": info["pending"],
                    "in_flight": info["in_flight"],
                    "rate": None if math.isinf(rate) else round(rate, 3),
                    "crawl_delay": info["crawl_delay"],
                    "state": circuit(info),
                    "down_since": info["down_since"],
                    "fails": info["fails"],
                    "ceiling": ceilings.get(info["domain"]),
                    # This crawl's own rate for the host (its rates option or an operator's).
                    "crawl_rate": _own(info["override"]),
                    "interval": info["interval"],
                    "address": info["address_group"],
                    "why": "; ".join(info["why"]),
                }
            )
    return rows


def _own(text: str | None) -> float | str | None:
    return None if text is None else "no limit" if text == "inf" else float(text)


def circuit(info: dict[str, Any]) -> str:
    """``dead`` (down longer than max_host_outage), ``down`` (circuit open) or ``ok``."""
    if info.get("dead"):
        return "dead"
    return "down" if info.get("down_since") else "ok"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
