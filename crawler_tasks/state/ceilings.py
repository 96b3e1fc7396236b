"""Cluster-wide per-host ceilings (``crawler set-ceiling HOST RATE``): requests/s that every
crawl of a host shares, on top of each crawl's own pace (its ``rate``, ``rates``, Crawl-delay
and ``crawler set-rate``, which every crawl gets in full). A crawl's release.lua paces its own
bucket; then :meth:`Ceilings.charge` takes the released URLs of a host with a ceiling through
that host's shared bucket (ceiling.lua), and the URLs over it go back to their frontier."""

from __future__ import annotations

import math
from dataclasses import dataclass

import redis

from .keys import Keys
from .scripts import Scripts

#: Requests a host with a ceiling may get at once after being idle, across all crawls: none.
#: The ceiling is charged at release, and requests start after a queueing delay that varies;
#: without a burst, that drift costs at most one request over ``rate x W`` in a window.
CEILING_BURST = 0
#: Seconds a ceiling's state outlives its last use.
STATE_TTL = 3600


@dataclass(frozen=True)
class Charged:
    allowed: int  # how many of the released URLs may go now (the first ones)
    wait: float  # seconds before the host's next request may


def set_ceiling(client: redis.Redis, keys: Keys, host: str, rate: float | None) -> None:
    """Set (requests/s > 0) or remove (None) ``host``'s ceiling."""
    if rate is None:
        client.hdel(keys.ceilings, host)
    elif not rate > 0 or math.isinf(rate):
        raise ValueError("a ceiling is a number of requests/s > 0")
    else:
        client.hset(keys.ceilings, host, repr(rate))


def read(client: redis.Redis, keys: Keys) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client.hgetall(keys.ceilings).items()}


class Ceilings:
    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.client, self.keys, self.scripts = client, keys, scripts

    def charge(self, host: str, rate: float, released: int) -> Charged:
        args = [1.0 / rate, CEILING_BURST, released, STATE_TTL]
        allowed, wait = self.scripts.ceiling(
            keys=[self.keys.ceiling(host)], args=args, client=self.client
        )
        return Charged(int(allowed), float(wait))
