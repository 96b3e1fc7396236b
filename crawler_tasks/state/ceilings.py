"""Cluster-wide per-host ceilings (``crawler set-ceiling HOST RATE``): requests/s that every
crawl of a host shares, on top of each crawl's own pace (its ``rate``, ``rates``, Crawl-delay
and ``crawler set-rate``, which every crawl gets in full). A crawl's release.lua paces its own
bucket; then :meth:`Ceilings.charge` takes the released URLs of a host with a ceiling through
that host's shared bucket (ceiling.lua), and the URLs over it go back to their frontier. At
the moment of sending, :meth:`Ceilings.send_slot` spaces the requests of every crawl of the host
(ceiling_gate.lua), whatever delayed them on the way."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import redis

from .keys import Keys
from .scripts import Scripts

#: Requests a host with a ceiling may get at once after being idle, across all crawls: none
#: (its send gate, ceiling_gate.lua, has none either: no two sends closer than 1/rate).
CEILING_BURST = 0
#: Seconds a ceiling's state outlives its last use.
STATE_TTL = 3600
#: Seconds a process trusts the ceilings it read (a new one applies within this).
REREAD = 1.0


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
    """The ceilings of one process: read at most once every ``REREAD`` seconds (they change
    rarely, by hand), charged at release (:meth:`charge`) and gated at send (:meth:`send_slot`)."""

    def __init__(self, client: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.client, self.keys, self.scripts = client, keys, scripts
        self._rates: dict[str, float] = {}
        self._read = -math.inf

    def rates(self) -> dict[str, float]:
        """host -> ceiling (requests/s), as read at most ``REREAD`` seconds ago."""
        now = time.monotonic()
        if now - self._read >= REREAD:
            self._rates, self._read = read(self.client, self.keys), now
        return self._rates

    def send_slot(self, host: str, rate: float) -> float:
        """0 when a request to ``host`` may be sent now under its ceiling, its slot taken
        (ceiling_gate.lua); else the seconds to wait before asking again."""
        args = [1.0 / rate, STATE_TTL]
        keys = [self.keys.ceiling_gate(host)]
        return float(self.scripts.ceiling_gate(keys=keys, args=args, client=self.client))

    def charge(self, host: str, rate: float, released: int) -> Charged:
        args = [1.0 / rate, CEILING_BURST, released, STATE_TTL]
        allowed, wait = self.scripts.ceiling(
            keys=[self.keys.ceiling(host)], args=args, client=self.client
        )
        return Charged(int(allowed), float(wait))
