"""The per-crawl Bloom filter that decides whether a URL was seen before.

A filter for ``capacity`` URLs at false-positive rate ``p`` needs ``m = -n ln p / (ln 2)^2``
bits and ``k = (m / n) ln 2`` hash functions: 1.2 bytes per URL at 1 %, 1.8 bytes at 0.1 %
(10 M URLs at 0.1 % = 18 MB). A Redis string holds at most 2^32 bits and allocating a large
one blocks Redis, so the bits are spread over shards of ``shard_bits`` each (8 MiB default):
a URL's shard and its ``k`` positions inside the shard come from one 128-bit murmur3 hash
(double hashing, Kirsch & Mitzenmacher), computed here so the Lua script only moves bits.

The filter never forgets (no false negatives); a false positive silently drops a new URL,
which is why :meth:`BloomFilter.stats` reports the fill ratio and the false-positive rate the
filter has *now*, not the rate it was designed for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mmh3
import redis

from .keys import CrawlKeys
from .scripts import Scripts

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BloomShape:
    """Size of a filter; derived from (capacity, error_rate, shard_bits) only."""

    capacity: int
    error_rate: float
    shard_bits: int
    shards: int
    k: int

    @classmethod
    def plan(cls, capacity: int, error_rate: float, shard_bits: int = 1 << 26) -> BloomShape:
        if capacity < 1 or not 0 < error_rate < 1:
            raise ValueError("bloom capacity must be >= 1 and error rate in (0, 1)")
        bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
        shards = max(1, math.ceil(bits / shard_bits))
        per_shard = math.ceil(bits / shards)
        k = max(1, round(per_shard * shards / capacity * math.log(2)))
        return cls(capacity, error_rate, per_shard, shards, k)

    @property
    def bits(self) -> int:
        return self.shard_bits * self.shards

    def positions(self, url: str) -> list[int]:
        """``[shard, offset_1 .. offset_k]`` for one URL (the layout the Lua scripts read)."""
        h = mmh3.hash128(url.encode("utf-8", "surrogatepass"), signed=False)
        h1, h2 = h & _MASK64, (h >> 64) | 1
        m = self.shard_bits
        out = [(h2 >> 40) % self.shards]
        out.extend((h1 + i * h2) % m for i in range(self.k))
        return out

    def false_positive_rate(self, fill: float) -> float:
        """Probability that a URL not in the filter finds all its k bits set."""
        return float(fill**self.k)


class BloomFilter:
    """Check-and-set of URL batches for one crawl, atomic across workers."""

    def __init__(
        self, client: redis.Redis, keys: CrawlKeys, shape: BloomShape, scripts: Scripts
    ) -> None:
        self.client = client
        self.shape = shape
        self.shard_keys = [keys.bloom(i) for i in range(shape.shards)]
        self._script = scripts.bloom_add

    def add_many(self, urls: Sequence[str]) -> list[bool]:
        """Add URLs; True for each one that was not in the filter before this call."""
        if not urls:
            return []
        args: list[int | str] = [self.shape.k, self.shape.shards]
        for url in urls:
            args.extend(self.shape.positions(url))
        result = self._script(keys=self.shard_keys, args=args, client=self.client)
        return [bool(x) for x in result]

    def contains(self, url: str) -> bool:
        shard, *offsets = self.shape.positions(url)
        pipe = self.client.pipeline(transaction=False)
        for off in offsets:
            pipe.getbit(self.shard_keys[shard], off)
        return all(pipe.execute())

    def stats(self) -> dict[str, float]:
        """Fill ratio (share of bits set) and the false-positive rate that fill implies."""
        pipe = self.client.pipeline(transaction=False)
        for key in self.shard_keys:
            pipe.bitcount(key)
        ones = sum(pipe.execute())
        fill = ones / self.shape.bits
        return {
            "bits": self.shape.bits,
            "bytes": self.shape.bits // 8,
            "k": self.shape.k,
            "shards": self.shape.shards,
            "fill_ratio": fill,
            "estimated_fp_rate": self.shape.false_positive_rate(fill),
            "design_fp_rate": self.shape.error_rate,
            "capacity": self.shape.capacity,
        }


def bloom_args(shape: BloomShape, items: Iterable[tuple[str, str, str]]) -> list[str | int]:
    """Flatten ``(domain, entry, url)`` triples into admit.lua's per-URL arguments."""
    args: list[str | int] = []
    for domain, entry, url in items:
        args.append(domain)
        args.append(entry)
        args.extend(shape.positions(url))
    return args
