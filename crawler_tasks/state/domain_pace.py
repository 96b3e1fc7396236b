"""The per-host reads of politeness: each domain's pace as the status, ``Crawl.domains()`` and
the dashboard's host table show it (its bucket's state, backlog, leases, the rates that apply,
and why). Reads only: the decisions are release.lua's and done.lua's, fed by
``politeness.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import redis

from .keys import CrawlKeys
from .pacing import Pacing, explain


def domains(
    client: redis.Redis,
    ck: CrawlKeys,
    owner_rates: Mapping[str, float],
    pacing: Pacing,
    names: list[str],
    cluster_rates: dict[bytes, bytes] | None = None,
    ceilings: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Current pace of each domain of the crawl ``ck`` (``owner_rates``: its own rates):
    effective req/s, slow-down, pending, in flight, its interval and why (``why``:
    pacing.explain). ``cluster_rates``: the ``set-rate`` hash read once by a caller asking
    about many domains (the dashboard's host table), instead of one HGET per domain;
    ``ceilings``: the shared ceilings (``ceilings.read``)."""
    pipe = client.pipeline(transaction=False)
    for d in names:
        pipe.hgetall(ck.domain(d))
        pipe.llen(ck.queue(d))
        pipe.zcard(ck.lease(d))
        # Pending beyond its head: its spill buffer and its chunks (state/tails.py).
        pipe.llen(ck.for_domain(d).spill(d))
        pipe.hget(ck.for_domain(d).spilled, d)
        if cluster_rates is None:
            pipe.hget(ck.cluster_rates, d)
    raw = pipe.execute()
    per = 5 if cluster_rates is not None else 6
    out = []
    for i, d in enumerate(names):
        state, head, inflight, buffered, chunked = raw[i * per : i * per + 5]
        pending = head + buffered + int(chunked or 0)
        if cluster_rates is None:
            cluster = raw[i * per + 5]
        else:
            cluster = cluster_rates.get(d.encode("utf-8", "surrogateescape"))
        own = owner_rates.get(d)
        own_text = None if own is None else "inf" if math.isinf(own) else repr(own)
        info = _describe(d, state, pending, inflight, own_text, cluster)
        info["ceiling"] = (ceilings or {}).get(d)
        info["address_group"] = info["address"] if pacing.grouped else None
        if info["address"] == "?" or info["address_exempt"]:
            info["address_group"] = None
        info["why"] = explain(info, pacing, time.time())
        out.append(info)
    return out


def _describe(
    domain: str, state: dict, pending: int, inflight: int, own: Any, cluster: Any
) -> dict[str, Any]:
    text = {k.decode(): v.decode() for k, v in state.items()}
    s = {k: float(v) for k, v in text.items() if k != "ip"}
    # Down: its circuit is open (done.lua: 3 connection failures in a row, no success since).
    down = s.get("fails", 0) >= 3 and "down_since" in s
    now = time.time()
    return {
        "domain": domain,
        "pending": pending,
        "in_flight": inflight,
        "crawl_delay": s.get("delay"),
        "interval": s.get("iv"),
        "slowdown": s.get("slow", 1.0),
        "not_before": s.get("not_before"),
        "override": own,
        "cluster_rate": cluster.decode() if cluster else None,
        "down_since": s["down_since"] if down else None,
        "next_probe_s": round(max(0.0, s.get("not_before", now) - now), 1) if down else None,
        "dead": s.get("dead") == 1.0,
        # Connection failures in a row (3 open the circuit; a success resets it).
        "fails": int(s.get("fails", 0)),
        # Its server address (state/pacing.py) and AutoThrottle's delay and latency.
        "address": text.get("ip"),
        "address_exempt": text.get("ipx") == "1",
        "autothrottle_delay": s.get("at"),
        "latency": s.get("lat"),
    }


def effective_rate(info: dict[str, Any], default_rate: float) -> float:
    """Requests/s a domain is released at now (mirrors release.lua's interval)."""
    slow, at = info.get("slowdown") or 1.0, info.get("autothrottle_delay") or 0.0
    if info.get("override"):
        own = float(info["override"])
        interval = 0.0 if math.isinf(own) else slow / own
    else:
        rate = float(info["cluster_rate"]) if info.get("cluster_rate") else default_rate
        interval = max(1 / rate if rate > 0 else 0.0, info.get("crawl_delay") or 0.0) * slow
    interval = max(interval, at)  # AutoThrottle's delay raises it (release.lua)
    return math.inf if interval == 0 else 1 / interval
