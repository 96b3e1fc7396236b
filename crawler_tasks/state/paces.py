"""The pace each seed host of a new crawl gets, as ``crawler crawl`` says it before the first
request: the crawl's ``rate``, replaced by ``crawler set-rate``'s for that domain (release.lua's
``pace``), under the host's ``crawler set-ceiling`` (every crawl of it shares that). robots.txt's
Crawl-delay and back-off can only lower it, and are known only once the crawl runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import redis

from ..web.urls import domain_key, host_of
from .ceilings import read as read_ceilings
from .keys import Keys
from .options import CrawlOptions


@dataclass(frozen=True)
class SeedPace:
    host: str
    rate: float  # requests/s this crawl may send the host (inf: no limit)
    set_rate: float | None  # crawler set-rate's for the host's domain, if any
    ceiling: float | None  # crawler set-ceiling's for the host, if any

    def why(self) -> str:
        parts = [f"crawler set-rate {self.set_rate:g}"] if self.set_rate is not None else []
        if self.ceiling is not None:
            parts.append(f"set-ceiling {self.ceiling:g}, shared by every crawl of it")
        return ", ".join(parts)


def read_set_rates(client: redis.Redis, keys: Keys) -> dict[str, float]:
    """``crawler set-rate``'s rates: domain -> requests/s (inf: no limit)."""
    return {k.decode(): float(v) for k, v in client.hgetall(keys.rates).items()}


def seed_paces(client: redis.Redis, keys: Keys, opts: CrawlOptions) -> list[SeedPace]:
    """The seed hosts whose pace is not the crawl's own ``rate`` (a set-rate or a ceiling
    applies), in the seeds' order. A host the crawl's owner named (``rates``) is its owner's."""
    set_rates, ceilings = read_set_rates(client, keys), read_ceilings(client, keys)
    if not set_rates and not ceilings:
        return []
    shown: dict[str, SeedPace] = {}
    for seed in opts.seeds:
        host = host_of(seed)
        if host in shown or host in opts.rates:
            continue
        set_rate = set_rates.get(domain_key(seed, opts.domain_key))
        ceiling = ceilings.get(host)
        if set_rate is None and ceiling is None:
            continue
        rate = opts.rate if set_rate is None else set_rate
        rate = rate if ceiling is None else min(rate, ceiling)
        shown[host] = SeedPace(host, rate, set_rate, ceiling)
    return list(shown.values())


def pace_words(rate: float) -> str:
    return "no limit" if math.isinf(rate) else f"{rate:g} request/s"
