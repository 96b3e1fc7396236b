"""A crawl's own host rates: the owner's ``rates`` option (fixed at start) and the rates an
operator set for this crawl while it runs (the dashboard's "Set rate", ``Crawl.set_host_rate``),
which win over it. Both replace, for this crawl only, the crawl's default rate, robots.txt's
Crawl-delay and the cluster-wide ``crawler set-rate``; a host's ceiling (``set-ceiling``)
still caps every crawl of it together.

Processes read the operator's hash at most once per :data:`REFRESH_S` (a release round reads
it through :meth:`CrawlRates.text`), so a change reaches every worker within that time."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping

import redis

from .keys import CrawlKeys

#: Seconds a process keeps the operator's per-crawl rates before reading them again.
REFRESH_S = 1.0


def rate_text(rate: float) -> str:
    return "inf" if math.isinf(rate) else repr(rate)


class CrawlRates(Mapping[str, float]):
    """host -> requests/s this crawl uses for it (math.inf: no limit, no Crawl-delay)."""

    def __init__(self, client: redis.Redis, ck: CrawlKeys, owner: Mapping[str, float]) -> None:
        self.client = client
        self.key = ck.host_rates
        self.owner = dict(owner)
        self._set: dict[str, float] = {}
        self._read_at = -math.inf

    def set(self, host: str, rate: float | None) -> None:
        """This crawl's rate for ``host`` (None: back to the owner's, or the default)."""
        if rate is None:
            self.client.hdel(self.key, host)
        else:
            self.client.hset(self.key, host, rate_text(rate))
        self._read_at = -math.inf

    def overrides(self) -> dict[str, float]:
        """The rates an operator set for this crawl (fresh within REFRESH_S)."""
        now = time.monotonic()
        if now - self._read_at > REFRESH_S:
            raw = self.client.hgetall(self.key)
            self._set = {k.decode(): float(v) for k, v in raw.items()}
            self._read_at = now
        return self._set

    def text(self) -> str:
        """As release.lua takes them: "host<TAB>rate" pairs, tab-joined."""
        return "\t".join(f"{h}\t{rate_text(r)}" for h, r in self._merged().items())

    def _merged(self) -> dict[str, float]:
        return {**self.owner, **self.overrides()}

    def __getitem__(self, host: str) -> float:
        return self._merged()[host]

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())
