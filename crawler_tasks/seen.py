"""The per-crawl Bloom filter that decides whether a URL was seen before.

A filter for ``capacity`` URLs at false-positive rate ``p`` needs ``m = -n ln p / (ln 2)^2``
bits and ``k = (m / n) ln 2`` hash functions: 1.2 bytes per URL at 1 %, 1.8 bytes at 0.1 %
(10 M URLs at 0.1 % = 18 MB). A Redis string holds at most 2^32 bits and allocating a large
one blocks Redis, so the bits are spread over shards of ``shard_bits`` each (8 MiB default):
a URL's shard and its ``k`` positions inside the shard come from one 128-bit murmur3 hash
(double hashing, Kirsch & Mitzenmacher): offset_i = (h1 + i * h2) mod m. The hash is computed
here; the scripts get three uint32 per URL, ``shard, h1 mod m, h2 mod m``, packed into one
string argument, and derive the ``k`` offsets with additions (bloom_lib.lua): the same bits
as :meth:`BloomShape.positions`, for a fraction of the argument traffic (~10x faster than one
argument per offset; ``bench/bloom.py`` measures it).

The filter never forgets (no false negatives); a false positive silently drops a new URL,
which is why :meth:`BloomFilter.stats` reports the fill ratio and the false-positive rate the
filter has *now*, not the rate it was designed for.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mmh3
import redis

from .keys import CrawlKeys
from .scripts import Scripts

_MASK64 = (1 << 64) - 1
#: array typecode of a 4-byte unsigned int (what bloom_lib.lua's ``struct.unpack('<I4')`` reads).
_U32 = next(code for code in ("I", "L") if array(code).itemsize == 4)


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

    def packed(self, urls: Iterable[str]) -> bytes:
        """``shard, h1 mod m, h2 mod m`` of each URL as little-endian uint32 triples: the form
        the Lua scripts read, from which they derive the same offsets as :meth:`positions`."""
        m, shards = self.shard_bits, self.shards
        hash64 = mmh3.hash64  # the two 64-bit halves of hash128: (h1, h2)
        values = array(_U32)
        for url in urls:
            h1, h2 = hash64(url.encode("utf-8", "surrogatepass"), signed=False)
            h2 |= 1
            values.append((h2 >> 40) % shards)
            values.append(h1 % m)
            values.append(h2 % m)
        if sys.byteorder != "little":
            values.byteswap()
        return values.tobytes()

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
        return self._call(urls, test_only=False)

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        """True for each URL the filter holds (or falsely believes it holds); sets nothing."""
        return [not new for new in self._call(urls, test_only=True)]

    def _call(self, urls: Sequence[str], test_only: bool) -> list[bool]:
        if not urls:
            return []
        shape = self.shape
        args = [shape.k, shape.shards, shape.shard_bits, shape.packed(urls)]
        if test_only:
            args.append(1)
        result = self._script(keys=self.shard_keys, args=args, client=self.client)
        if isinstance(result, str):  # a client made with decode_responses=True
            result = result.encode()
        return [c == 49 for c in result]  # b"1"

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


def bloom_args(shape: BloomShape, items: Sequence[tuple[str, str, str]]) -> list[str | int | bytes]:
    """admit.lua's arguments from ARGV[8] on for ``(domain, entry, url)`` triples: bits per
    shard, the packed hashes of every URL, then per URL its domain and entry."""
    args: list[str | int | bytes] = [shape.shard_bits, shape.packed(url for _, _, url in items)]
    for domain, entry, _ in items:
        args.append(domain)
        args.append(entry)
    return args
