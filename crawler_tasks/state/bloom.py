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

Memory follows what is stored, not what the filter is sized for. Redis allocates a shard
whole up to its highest bit set, so a URL that lands in an untouched shard costs the shard:
a script call names only the shards its URLs touch (the shard of the packed triple is an
index into that call's keys), and a filter of more than ``FEW_SHARDS`` shards (a crawl with a
big ``max_pages``) is cut into ``SMALL_SHARD_BITS`` shards, 64 KiB each. A 31-page site under
``max_pages = 10**9`` then costs at most 31 x 64 KiB, not 31 x 8 MiB
(tests/integration/test_seen.py).

The filter never forgets (no false negatives); a false positive silently drops a new URL,
which is why :meth:`BloomFilter.stats` reports the fill ratio and the false-positive rate the
filter has *now*, not the rate it was designed for.

Because it never forgets, a URL the filter held once it holds for the rest of the crawl:
:class:`KnownURLs` remembers, per process, the hashes of URLs admit.lua has already put in (or
found in) the filter, and the frontier drops those before calling admit.lua, counting them
as the duplicates they are. Navigation links repeat on every page of a site, so most links a
parser sees are such repeats: each one cost Redis ~7 us of Bloom reads.
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
#: Filters of up to this many shards keep the ``shard_bits`` setting (8 MiB: the default
#: 10 M-URL filter is 3 shards, ~3 BITFIELD calls a batch); bigger ones use small shards so
#: that a shard first touched costs 64 KiB (more calls a batch, memory as the URLs come).
FEW_SHARDS = 4
SMALL_SHARD_BITS = 1 << 19
#: Shards per partition whose bits :meth:`BloomFilter.stats` counts: URLs spread evenly over
#: shards, so a sample gives the fill ratio without reading a million keys.
STATS_SAMPLE = 64
#: array typecode of a 4-byte unsigned int (what bloom_lib.lua's ``struct.unpack('<I4')`` reads).
_U32 = next(code for code in ("I", "L") if array(code).itemsize == 4)


def url_hash(url: str) -> int:
    """The 128-bit murmur3 hash that a URL's shard and bits derive from."""
    return int(mmh3.hash128(url.encode("utf-8", "surrogatepass"), signed=False))


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
        if bits > FEW_SHARDS * shard_bits:
            shard_bits = min(shard_bits, SMALL_SHARD_BITS)
        shards = max(1, math.ceil(bits / shard_bits))
        per_shard = math.ceil(bits / shards)
        k = max(1, round(per_shard * shards / capacity * math.log(2)))
        return cls(capacity, error_rate, per_shard, shards, k)

    @property
    def bits(self) -> int:
        return self.shard_bits * self.shards

    @property
    def upfront_bytes(self) -> int:
        """Redis bytes the first admit may allocate: every shard of a filter of up to
        ``FEW_SHARDS``, that many 64-KiB shards of a bigger one (the rest come with URLs)."""
        return min(self.shards, FEW_SHARDS) * self.shard_bits // 8

    def positions(self, url: str) -> list[int]:
        """``[shard, offset_1 .. offset_k]`` for one URL (the layout the Lua scripts read)."""
        h = mmh3.hash128(url.encode("utf-8", "surrogatepass"), signed=False)
        h1, h2 = h & _MASK64, (h >> 64) | 1
        m = self.shard_bits
        out = [(h2 >> 40) % self.shards]
        out.extend((h1 + i * h2) % m for i in range(self.k))
        return out

    def packed(self, urls: Iterable[str]) -> tuple[bytes, list[int]]:
        """:meth:`pack` of the URLs' hashes."""
        return self.pack([url_hash(url) for url in urls])

    def pack(self, hashes: Iterable[int]) -> tuple[bytes, list[int]]:
        """``(triples, shards)``: ``s, h1 mod m, h2 mod m`` of each URL as little-endian uint32
        triples, the form the Lua scripts read (they derive the same offsets as
        :meth:`positions`), where ``s`` indexes ``shards``, the filter shards these URLs touch
        (in first-touched order): the only keys the call names."""
        m, count = self.shard_bits, self.shards
        values = array(_U32)
        local: dict[int, int] = {}
        for h in hashes:
            h2 = (h >> 64) | 1
            shard = (h2 >> 40) % count
            values.append(local.setdefault(shard, len(local)))
            values.append((h & _MASK64) % m)
            values.append(h2 % m)
        if sys.byteorder != "little":
            values.byteswap()
        return values.tobytes(), list(local)

    def false_positive_rate(self, fill: float) -> float:
        """Probability that a URL not in the filter finds all its k bits set."""
        return float(fill**self.k)


class BloomFilter:
    """Check-and-set of URL batches for one crawl, atomic across workers. Each partition of
    the crawl (keys.py) has a filter of this shape for its own URLs; a batch is split by
    partition, one script call each."""

    def __init__(
        self, client: redis.Redis, keys: CrawlKeys, shape: BloomShape, scripts: Scripts
    ) -> None:
        self.client = client
        self.shape = shape
        self.keys = keys
        self._script = scripts.bloom_add

    def add_many(self, urls: Sequence[str]) -> list[bool]:
        """Add URLs; True for each one that was not in the filter before this call."""
        return self._call(urls, test_only=False)

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        """True for each URL the filter holds (or falsely believes it holds); sets nothing."""
        return [not new for new in self._call(urls, test_only=True)]

    def _call(self, urls: Sequence[str], test_only: bool) -> list[bool]:
        by_part: dict[int, list[int]] = {}
        for i, url in enumerate(urls):
            by_part.setdefault(self.keys.for_url(url).index, []).append(i)
        out = [False] * len(urls)
        for part, indexes in by_part.items():
            subset = [urls[i] for i in indexes]
            news = self._call_part(part, subset, test_only)
            for i, new in zip(indexes, news, strict=True):
                out[i] = new
        return out

    def _call_part(self, part: int, urls: list[str], test_only: bool) -> list[bool]:
        shape, pk = self.shape, self.keys.parts[part]
        packed, shards = shape.packed(urls)
        args = [shape.k, len(shards), shape.shard_bits, packed]
        if test_only:
            args.append(1)
        keys = [pk.bloom(s) for s in shards]
        result = self._script(keys=keys, args=args, client=self.client)
        if isinstance(result, str):  # a client made with decode_responses=True
            result = result.encode()
        return [c == 49 for c in result]  # b"1"

    def stats(self) -> dict[str, float]:
        """Fill ratio (share of bits set, counted on up to ``STATS_SAMPLE`` shards of each
        partition) and the false-positive rate that fill implies."""
        pipe = self.client.pipeline(transaction=False)
        sample = min(self.shape.shards, STATS_SAMPLE)
        for pk in self.keys.parts:
            for shard in range(sample):
                pipe.bitcount(pk.bloom(shard))
        ones = sum(pipe.execute())
        fill = ones / (self.shape.shard_bits * sample * len(self.keys.parts))
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


class KnownURLs:
    """Hashes of URLs one crawl's Bloom filter is known to hold, remembered by this process.

    Exact, not a guess: a hash goes in only after admit.lua reported its URL admitted or a
    duplicate (its bits set either way), and bits are never cleared, so the filter would call
    it a duplicate again. Keyed by the 128-bit hash, which fixes the URL's bits (~70 bytes an
    entry). Bounded: cleared, not evicted one by one, at ``max_size`` entries; repeated links
    are back after a page or two. Safe to share between threads (set operations under the
    GIL; a lost update only costs a Redis round trip).
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._hashes: set[int] = set()

    def __len__(self) -> int:
        return len(self._hashes)

    def split(
        self, items: Sequence[tuple[str, str, str]]
    ) -> tuple[list[tuple[str, str, str]], list[int], int]:
        """``(items not known, their hashes, how many were known)``."""
        hash128, known = mmh3.hash128, self._hashes
        keep: list[tuple[str, str, str]] = []
        hashes: list[int] = []
        for item in items:
            h = hash128(item[2].encode("utf-8", "surrogatepass"), signed=False)
            if h not in known:
                keep.append(item)
                hashes.append(h)
        return keep, hashes, len(items) - len(keep)

    def drop_known(self, urls: Sequence[str]) -> tuple[list[str], int]:
        """``(urls not known, how many were known)``: cheaper than scoping known links."""
        hash128, known = mmh3.hash128, self._hashes
        keep = [
            u
            for u in urls
            if hash128(u.encode("utf-8", "surrogatepass"), signed=False) not in known
        ]
        return keep, len(urls) - len(keep)

    def remember(self, hashes: Iterable[int]) -> None:
        if len(self._hashes) >= self.max_size:
            self._hashes.clear()
        self._hashes.update(hashes)
