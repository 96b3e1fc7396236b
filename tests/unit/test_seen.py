"""The Bloom filter's shape: the textbook optimum, and shards that keep each key small. The filter
against a real Redis: tests/integration/test_seen.py."""

from __future__ import annotations

import math

import pytest

from crawler_tasks.state.bloom import SMALL_SHARD_BITS, BloomShape


@pytest.mark.parametrize(
    ("capacity", "p", "bits_per_url"),
    [(1000, 0.01, 9.59), (10_000_000, 0.001, 14.38), (100, 0.5, 1.44)],
)
def test_shape_is_the_textbook_optimum(capacity, p, bits_per_url):
    shape = BloomShape.plan(capacity, p)
    assert shape.bits / capacity == pytest.approx(bits_per_url, rel=0.01)
    assert shape.k == max(1, round(-math.log(p) / math.log(2)))


def test_shards_keep_keys_small():
    assert BloomShape.plan(10_000_000, 0.001, shard_bits=1 << 26).shards == 3  # the default
    shape = BloomShape.plan(100_000_000, 0.001, shard_bits=1 << 26)
    # Past FEW_SHARDS shards of 8 MiB, shards of 64 KiB: a shard first touched costs little.
    assert SMALL_SHARD_BITS * 0.99 < shape.shard_bits <= SMALL_SHARD_BITS
    assert shape.shards == math.ceil(shape.bits / shape.shard_bits)
    assert all(0 <= o < shape.shard_bits for o in shape.positions("https://e.org/")[1:])
