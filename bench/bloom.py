"""Bloom filter benchmark: check-and-set throughput, memory per URL, false-positive rate.

    .venv/bin/python bench/bloom.py            # tables (about 1.5 minutes)
    .venv/bin/python bench/bloom.py --json     # the same figures as JSON
    .venv/bin/python bench/bloom.py --quick    # 200k URLs instead of 1M in the accuracy part

Everything runs against a private ``redis-server`` (``crawler_tasks.surface.embedded.private_redis``),
never the one on port 6379. Measures:

1. Throughput of ``BloomFilter.add_many`` from ONE client, batches of 1,000 URLs, on the
   default filter (10 M URLs at 0.1 %: 3 shards, k = 10): URLs/s for new URLs, for URLs
   already in the filter and for the read-only ``contains_many``, with the client's and
   Redis's microseconds per URL (Redis's from ``INFO commandstats``); each case is run
   ``--repeat`` times (3) and the median run is shown, with the best and worst rates. The legacy encoding
   (one script argument per bit offset, test-then-set; ``bench/legacy_bloom.lua``) is
   measured too, for before/after: at 1,000 URLs per call it fails ("too many results to
   unpack"), so it is also run at the largest batch it survives.
2. Memory: planned bits per URL at the default error rate (0.001) vs the optimum
   ``-ln p / (ln 2)^2``, and the bytes Redis really allocates for the shards.
3. Accuracy: 1,000,000 synthetic URLs added to a filter sized for 1,000,000 at p = 0.01 and
   p = 0.001, then 1,000,000 never-added URLs tested (read-only): measured false-positive
   rate vs the design and vs ``(1 - e^(-kn/m))^k``; then every added URL tested again: the
   false negatives must be 0.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import _util
import redis

from crawler_tasks.settings import Settings
from crawler_tasks.state.bloom import BloomFilter, BloomShape
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.scripts import Scripts
from crawler_tasks.surface.embedded import private_redis

BATCH = 1000
LEGACY_LUA = Path(__file__).with_name("legacy_bloom.lua")


def members(n: int, offset: int = 0) -> list[str]:
    """Realistic-looking, distinct URLs over 1,000 hosts."""
    return [
        f"https://www.site{i % 1000}.example.com/section/{i % 37}/article-{i}.html?ref={i % 11}"
        for i in range(offset, offset + n)
    ]


def outsiders(n: int) -> list[str]:
    """URLs never added (a different scheme of paths, so no overlap with members())."""
    return [
        f"https://blog{i % 997}.example.org/{i * 7919}/comments?page={i % 13}" for i in range(n)
    ]


def evalsha_usec(client: redis.Redis) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0))


def timed(client: redis.Redis, fn: Any, urls: list[str], batch: int = BATCH) -> dict[str, Any]:
    """Run ``fn(batch)`` over ``urls``; wall URLs/s, Redis us per URL, client us per URL."""
    before = evalsha_usec(client)
    answers: list[bool] = []
    start = time.perf_counter()
    for i in range(0, len(urls), batch):
        answers += fn(urls[i : i + batch])
    wall = time.perf_counter() - start
    redis_us = (evalsha_usec(client) - before) / len(urls)
    wall_us = wall / len(urls) * 1e6
    return {
        "urls": len(urls),
        "batch": batch,
        "urls_per_s": len(urls) / wall,
        "wall_us_per_url": wall_us,
        "redis_us_per_url": redis_us,
        "client_us_per_url": max(wall_us - redis_us, 0.0),
        "answered_true": sum(answers),
    }


class LegacyBloom:
    """The old encoding: one argument per offset, test then set (bench/legacy_bloom.lua)."""

    def __init__(self, client: redis.Redis, bloom: BloomFilter) -> None:
        self.client, self.shape, self.keys = client, bloom.shape, flat_keys(bloom)
        self.script = client.register_script(LEGACY_LUA.read_text("utf-8"))

    def add_many(self, urls: list[str]) -> list[bool]:
        args: list[int] = [self.shape.k, self.shape.shards]
        for url in urls:
            args.extend(self.shape.positions(url))
        return [bool(x) for x in self.script(keys=self.keys, args=args, client=self.client)]


def flat_keys(bloom: BloomFilter) -> list[str]:
    """Every shard key of every partition (a bench filter has one partition)."""
    return [pk.bloom(i) for pk in bloom.keys.parts for i in range(bloom.shape.shards)]


def fresh(client: redis.Redis, bloom: BloomFilter) -> None:
    """Empty the filter and allocate its shards (a cost paid once per crawl, not per URL)."""
    for key in flat_keys(bloom):
        client.delete(key)
        client.setbit(key, bloom.shape.shard_bits - 1, 0)


def summarise(case: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by URLs/s) of a case, plus the best and worst rates."""
    runs = sorted(runs, key=lambda r: r["urls_per_s"])
    mid = runs[len(runs) // 2]
    return {
        "case": case,
        **mid,
        "best_urls_per_s": runs[-1]["urls_per_s"],
        "worst_urls_per_s": runs[0]["urls_per_s"],
        "runs": len(runs),
    }


def throughput(
    client: redis.Redis, n: int, legacy: bool, repeat: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    defaults = Settings()
    shape = BloomShape.plan(
        defaults.bloom_capacity, defaults.bloom_error_rate, defaults.bloom_shard_bits
    )
    scripts = Scripts(client)
    urls = members(n)
    bloom = BloomFilter(client, Keys("bench").crawl("throughput"), shape, scripts)
    cases: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        fresh(client, bloom)
        cases.setdefault("add_many, new URLs", []).append(timed(client, bloom.add_many, urls))
        cases.setdefault("add_many, URLs already in", []).append(
            timed(client, bloom.add_many, urls)
        )
        cases.setdefault("contains_many (read-only)", []).append(
            timed(client, bloom.contains_many, urls)
        )
    memory = {
        "capacity": shape.capacity,
        "error_rate": shape.error_rate,
        "k": shape.k,
        "shards": shape.shards,
        "optimum_bits_per_url": -math.log(shape.error_rate) / math.log(2) ** 2,
        "planned_bits_per_url": shape.bits / shape.capacity,
        "planned_bytes": shape.bits // 8,
        "redis_allocated_bytes": sum(client.memory_usage(k) or 0 for k in flat_keys(bloom)),
    }
    memory["redis_bytes_per_url"] = memory["redis_allocated_bytes"] / shape.capacity
    rows = [summarise(case, runs) for case, runs in cases.items()]
    if legacy:
        rows += legacy_rows(client, bloom, urls[: min(n, 100_000)], repeat)
    for key in flat_keys(bloom):
        client.delete(key)
    return rows, memory


def legacy_rows(
    client: redis.Redis, bloom: BloomFilter, urls: list[str], repeat: int
) -> list[dict[str, Any]]:
    """Before/after: the old encoding (one argument per offset), and the new one at the batch
    size the old one survives."""
    rows: list[dict[str, Any]] = []
    shape = bloom.shape
    old_bloom = BloomFilter(client, Keys("bench").crawl("legacy"), shape, Scripts(client))
    old = LegacyBloom(client, old_bloom)
    fresh(client, old_bloom)
    try:
        old.add_many(urls[:BATCH])
        rows.append({"case": "legacy, batch 1000", "urls": BATCH, "batch": BATCH})
    except redis.ResponseError as exc:  # "user_script:27: too many results to unpack ..."
        message = str(exc).split(": ", 1)[-1].split(" script:")[0]
        rows.append({"case": "legacy, batch 1000", "batch": BATCH, "error": message})
    # 150 URLs x 10 bits x 4 arguments = 6,000 per BITFIELD: the largest safe batch with one
    # shard (with three it survives ~500); the new encoding is measured at 150 too.
    cases: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        fresh(client, old_bloom)
        cases.setdefault("legacy add_many, new URLs", []).append(
            timed(client, old.add_many, urls, batch=150)
        )
        cases.setdefault("legacy add_many, URLs already in", []).append(
            timed(client, old.add_many, urls, batch=150)
        )
        fresh(client, bloom)
        cases.setdefault("add_many, new URLs, batch 150", []).append(
            timed(client, bloom.add_many, urls, batch=150)
        )
    for key in flat_keys(old_bloom):
        client.delete(key)
    return rows + [summarise(case, runs) for case, runs in cases.items()]


def accuracy(client: redis.Redis, n: int, tests: int, p: float) -> dict[str, Any]:
    shape = BloomShape.plan(n, p)
    bloom = BloomFilter(client, Keys("bench").crawl(f"fp-{p}"), shape, Scripts(client))
    used_before = client.info("memory")["used_memory"]
    inserted = members(n)
    start = time.perf_counter()
    collided = 0
    for i in range(0, n, BATCH):
        collided += sum(not new for new in bloom.add_many(inserted[i : i + BATCH]))
    add_s = time.perf_counter() - start
    used_after = client.info("memory")["used_memory"]
    others = outsiders(tests)
    false_pos = 0
    start = time.perf_counter()
    for i in range(0, tests, BATCH):
        false_pos += sum(bloom.contains_many(others[i : i + BATCH]))
    test_s = time.perf_counter() - start
    false_neg = 0
    for i in range(0, n, BATCH):
        false_neg += sum(not there for there in bloom.contains_many(inserted[i : i + BATCH]))
    stats = bloom.stats()
    theory = (1 - math.exp(-shape.k * n / shape.bits)) ** shape.k
    for key in flat_keys(bloom):
        client.delete(key)
    return {
        "design_p": p,
        "inserted": n,
        "k": shape.k,
        "bits_per_url": shape.bits / n,
        "reported_seen_while_adding": collided,
        "tested_never_added": tests,
        "false_positives": false_pos,
        "measured_fp_rate": false_pos / tests,
        "theory_fp_rate": theory,
        "fill_ratio": stats["fill_ratio"],
        "fill_estimate_fp": stats["estimated_fp_rate"],
        "false_negatives": false_neg,
        "used_memory_delta": used_after - used_before,
        "add_urls_per_s": n / add_s,
        "test_urls_per_s": tests / test_s,
    }


def big_filter_small_site(client: redis.Redis, urls: int = 31) -> dict[str, Any]:
    """Redis bytes of a filter sized for max_pages = 10**9 that stores a small site's URLs:
    what a careless ``--max-pages`` costs (it was 8 MiB per shard touched, ~7 MB a page)."""
    shape = BloomShape.plan(10**9, 0.001, Settings().bloom_shard_bits)
    bloom = BloomFilter(client, Keys("bench").crawl("big"), shape, Scripts(client))
    before = client.info("memory")["used_memory"]
    bloom.add_many(members(urls))
    used = client.info("memory")["used_memory"] - before
    client.delete(*[k for k in client.scan_iter(match="bench:{big*", count=1000)])
    return {
        "capacity": shape.capacity,
        "shards": shape.shards,
        "urls": urls,
        "redis_bytes": used,
        "redis_bytes_per_url": used / urls,
    }


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--quick", action="store_true", help="200k URLs in the accuracy part")
    p.add_argument("--throughput-urls", type=int, default=300_000)
    p.add_argument("--no-legacy", action="store_true", help="skip the before/after rows")
    p.add_argument("--repeat", type=int, default=3, help="runs per throughput case (median)")
    p.add_argument("--accuracy-urls", type=int, help="URLs in the accuracy part (default 1M)")
    args = p.parse_args()
    n = args.accuracy_urls or (200_000 if args.quick else 1_000_000)
    with private_redis() as url:
        client = redis.Redis.from_url(url)
        _util.log(args, f"throughput: {args.throughput_urls:,} URLs, batches of {BATCH}")
        rows, memory = throughput(
            client, args.throughput_urls, legacy=not args.no_legacy, repeat=args.repeat
        )
        acc = []
        for rate in (0.01, 0.001):
            _util.log(args, f"accuracy: {n:,} URLs in a filter for {n:,} at p={rate}")
            acc.append(accuracy(client, n, n, rate))
        big = big_filter_small_site(client)
        client.close()
    result = {"throughput": rows, "memory": memory, "accuracy": acc, "big_filter": big}
    tput_cols = [
        "case",
        "batch",
        "urls",
        "urls_per_s",
        "best_urls_per_s",
        "worst_urls_per_s",
        "wall_us_per_url",
        "redis_us_per_url",
        "client_us_per_url",
        "answered_true",
        "error",
    ]
    mem_rows = [
        {"figure": "bits per URL, optimum -ln p/(ln 2)^2", "value": memory["optimum_bits_per_url"]},
        {"figure": "bits per URL, planned filter", "value": memory["planned_bits_per_url"]},
        {"figure": "bytes per URL, planned", "value": memory["planned_bits_per_url"] / 8},
        {"figure": "bytes per URL, Redis MEMORY USAGE", "value": memory["redis_bytes_per_url"]},
        {
            "figure": "filter bytes for 10 M URLs (allocated)",
            "value": memory["redis_allocated_bytes"],
        },
        {"figure": "k / shards", "value": f"{memory['k']} / {memory['shards']}"},
        {
            "figure": f"Redis bytes, {big['urls']} URLs in a filter for 10^9 "
            f"({big['shards']:,} shards)",
            "value": big["redis_bytes"],
        },
    ]
    acc_cols = [
        "design_p",
        "inserted",
        "k",
        "bits_per_url",
        "tested_never_added",
        "false_positives",
        "measured_fp_rate",
        "theory_fp_rate",
        "fill_ratio",
        "false_negatives",
        "reported_seen_while_adding",
        "used_memory_delta",
        "add_urls_per_s",
        "test_urls_per_s",
    ]
    _util.emit(
        args,
        result,
        [
            _util.table(
                f"Bloom check-and-set from one client (default filter: "
                f"{memory['capacity']:,} URLs at p={memory['error_rate']})",
                rows,
                tput_cols,
            ),
            _util.table("Memory at the default error rate", mem_rows),
            _util.table(
                "False positives / negatives (filter sized for the URLs inserted)", acc, acc_cols
            ),
        ],
    )
    ok = all(a["false_negatives"] == 0 for a in acc)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
