"""The Bloom filter against a real Redis: exact for what it holds, and as wrong as designed for
what it does not (the benchmark measures 1 M URLs; this is the CI-sized check)."""

from __future__ import annotations

import dataclasses

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.state.bloom import SMALL_SHARD_BITS, BloomFilter, BloomShape
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.scripts import Scripts


def urls(prefix: str, n: int) -> list[str]:
    return [f"https://{prefix}{i % 97}.example.org/path/{i}?q={i * 7}" for i in range(n)]


def test_no_false_negatives_and_designed_false_positive_rate(client):
    n, p = 20_000, 0.01
    bloom = BloomFilter(
        client, Keys("t").crawl("bloom"), BloomShape.plan(n, p, 1 << 14), Scripts(client)
    )
    assert bloom.shape.shards > 1  # the sharded path is the one under test
    members = urls("in", n)
    fresh = []
    for i in range(0, n, 1000):
        fresh += bloom.add_many(members[i : i + 1000])
    assert sum(fresh) >= n * (1 - p)  # a few collide with earlier members, as designed
    assert not any(bloom.add_many(members[:5000]))  # present: never reported new
    outsiders = urls("out", n)
    # Read-only test: adding them would fill the filter past its capacity as we measure.
    false_positives = sum(bloom.contains_many(outsiders[:10000]))
    rate = false_positives / 10000
    assert 0.75 * p <= rate <= 1.25 * p, rate
    stats = bloom.stats()
    assert stats["estimated_fp_rate"] == pytest.approx(p, rel=0.5)
    assert 0.4 < stats["fill_ratio"] < 0.6


def test_check_and_set_is_atomic_within_a_batch(client):
    bloom = BloomFilter(
        client, Keys("t").crawl("dup"), BloomShape.plan(1000, 0.01), Scripts(client)
    )
    assert bloom.add_many(["https://a.org/", "https://b.org/"]) == [True, True]
    assert bloom.add_many(["https://b.org/", "https://c.org/"]) == [False, True]


def test_a_huge_filter_costs_what_it_stores(client):
    """max_pages 10**9 on a 31-page site: each URL's shard is allocated as it is touched, and
    a call names only those shards (it named all of them: 2e13 for max_pages 1e20)."""
    shape = BloomShape.plan(10**9, 0.001, shard_bits=1 << 26)
    bloom = BloomFilter(client, Keys("t").crawl("huge"), shape, Scripts(client))
    before = client.info("memory")["used_memory"]
    assert all(bloom.add_many(urls("site", 31)))
    assert not any(bloom.add_many(urls("site", 31)))
    used = client.info("memory")["used_memory"] - before
    assert used < 31 * (SMALL_SHARD_BITS // 8) * 1.2, used  # it was ~7 MB a page


def _admit_story(settings, **limits):  # type: ignore[no-untyped-def]
    """The same admissions into a crawl with and without a limit on pages: admit.lua sets the
    Bloom bits in one pass when nothing can leave a new URL out, else tests, then sets those
    of the URLs it took."""
    a, b, c, d = (f"http://h{i}.example/p" for i in range(4))
    crawl = start_crawl([a], settings=settings, **limits)
    frontier = crawl.store.frontier
    # No KnownURLs: every URL goes to Redis, as a crawl without a start time does.
    frontier.opts = dataclasses.replace(frontier.opts, started_at=0.0)
    got = [
        frontier.admit([(b, 1), (b, 1), (a, 1)], refused=[(d, 1)]),
        frontier.admit([(c, 2), (d, 2), (b, 2)]),
    ]
    counters = crawl.stats.counters()
    queues = {
        h: [e.decode() for e in crawl.client.lrange(crawl.ck.queue(f"h{h}.example"), 0, -1)]
        for h in range(4)
    }
    keep = ("admitted", "discovered", "deduplicated", "robots_disallowed", "queued")
    return got, {k: counters.get(k) for k in keep}, queues


def test_admission_reads_alike_with_and_without_a_page_limit(settings):  # type: ignore[no-untyped-def]
    one_pass = _admit_story(settings)
    tested = _admit_story(settings, max_pages=1000)
    assert one_pass == tested
    got, counters, queues = one_pass
    assert [(g.admitted, g.duplicates, g.disallowed) for g in got] == [(1, 2, 1), (1, 2, 0)]
    assert counters["admitted"] == 3 and counters["deduplicated"] == 4
    assert queues == {
        0: ["0|http://h0.example/p"],
        1: ["1|http://h1.example/p"],
        2: ["2|http://h2.example/p"],
        3: [],
    }
