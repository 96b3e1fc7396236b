"""bench/frontier.py --tails: a frontier bigger than Redis's memory (state/tails.py), measured.

Per case, a crawl with no workers in its own ``redis-server``: ``--urls`` pending URLs over
``--hosts`` hosts admitted through ``Frontier.admit`` (the path parse tasks use, 1,000 per
call, hosts interleaved as a broad crawl's pages name them), then every full spill buffer
flushed as the dispatcher does (``Tails.tend``). Reported: Redis ``used_memory`` delta per
pending URL (the Bloom filter grown before the baseline: the issue's figure is the frontier's)
right after the admissions and full buffers' flushes ("buffers in") and once the buffers short
of a chunk have waited ``--flush-seconds`` and been written out too, with where it goes by kind
of key (``MEMORY USAGE``: heads, buffers, chunk indexes, other), chunk-store bytes per URL (the files' sizes; ``du`` adds the filesystem's blocks), admission
and flush rates, then the release rate: release.lua over every partition with the dispatcher's
refills between calls, at no rate limit, until ``--release`` URLs are out.

Cases: everything in Redis (a head no admission fills), ``CRAWLER_FRONTIER_HEAD=16``, and the
default head rule (5 minutes of fetching at the crawl's rate, ``--rate``; its release part is
skipped: a polite rate, not the frontier, bounds it).
"""

from __future__ import annotations

import math
import tempfile
import time
from typing import Any

import _util
import redis
from _urls import realistic_urls

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import private_redis

#: (case, frontier_head, whether the crawl is unpaced: its release rate is measured)
CASES = (("all in Redis", 100_000_000, True), ("HEAD=16", 16, True), ("default rule", 0, False))


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def tend_all(crawl: Any) -> int:
    """Every partition tended until nothing is left to flush or refill; chunks written."""
    total = 0
    while True:
        done = [crawl.store.frontier.tails.tend(p) for p in range(len(crawl.ck.parts))]
        moved = sum(t.flushed + t.refilled for t in done)
        total += sum(t.flushed for t in done)
        if not moved:
            return total


def one_case(args: Any, name: str, head: int, unpaced: bool) -> dict[str, Any]:
    urls = realistic_urls(args.urls, args.hosts)
    seeds = sorted({u.split("/", 3)[0] + "//" + u.split("/", 3)[2] + "/" for u in urls})
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-tails-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        pace = {"rate": math.inf, "concurrency": 1000} if unpaced else {"rate": args.rate}
        crawl = start_crawl(
            seeds,
            settings=settings,
            client=client,
            output=tmp,
            frontier_head=head,
            frontier_chunk=args.chunk,
            frontier_flush_seconds=args.flush_seconds,
            frontier_store=f"{tmp}/frontier",  # given: the default rule spills only with a store
            **pace,
        )
        ck = crawl.ck.parts[0]
        shape = crawl.options.bloom
        for i in range(shape.shards):  # the filter's fixed allocation before the baseline
            client.setbit(ck.bloom(i), shape.shard_bits - 1, 0)
        baseline = used_memory(client)
        t0 = time.perf_counter()
        for i in range(0, len(urls), 1000):
            crawl.store.frontier.admit((u, 1) for u in urls[i : i + 1000])
        admit_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        chunks = tend_all(crawl)
        flush_s = time.perf_counter() - t1
        buffered = used_memory(client) - baseline
        # The buffers left short of a chunk are written out once they have waited
        # frontier_flush_seconds (the dispatcher's rounds): the frontier as it then stays.
        time.sleep(args.flush_seconds)
        tend_all(crawl)
        memory = used_memory(client) - baseline
        kinds = by_kind(client, len(urls))
        files, chunk_bytes = crawl.store.frontier.tails.store.size()
        pending = int(crawl.stats.counters().get("queued", 0))
        row: dict[str, Any] = {
            "case": name,
            "pending": pending,
            "redis B/URL": memory / len(urls),
            "buffers in": buffered / len(urls),
            **kinds,
            "chunk B/URL": chunk_bytes / len(urls),
            "chunks": files,
            "admit URLs/s": len(urls) / admit_s,
            "flush URLs/s": chunks * args.chunk / flush_s if chunks else None,
        }
        if unpaced:
            row.update(release_rate(crawl, args.release))
        client.close()
    return row


#: The frontier's keys by kind (keys.py PartKeys): heads, spill buffers, chunk indexes, and the
#: per-host politeness hashes and partition-wide sets and zsets beside them.
KINDS = {"q": "heads", "sp": "buffers", "ix": "indexes"}


def by_kind(client: redis.Redis, urls: int) -> dict[str, float]:
    """B/URL of each kind of key (MEMORY USAGE, every key but the Bloom filter's shards, whose
    allocation precedes the baseline): where Redis's bytes per pending URL go."""
    sums: dict[str, int] = {}
    for key in client.scan_iter(count=1000):
        kind = key.decode().rsplit("}:", 1)[-1].split(":", 1)[0]
        if kind == "bloom":
            continue
        name = KINDS.get(kind, "other")
        sums[name] = sums.get(name, 0) + int(client.memory_usage(key, samples=0) or 0)
    return {f"{name} B/URL": sums.get(name, 0) / urls for name in (*KINDS.values(), "other")}


def release_rate(crawl: Any, wanted: int) -> dict[str, Any]:
    """URLs/s out of release.lua (every partition; the dispatcher's tend between rounds)."""
    released, t0 = 0, time.perf_counter()
    while released < wanted:
        got = 0
        for p in range(len(crawl.ck.parts)):
            crawl.store.frontier.tails.tend(p)
            got += len(crawl.store.frontier.release(p, 500, 600.0, budget=None).entries)
        released += got
        if not got:
            break
    took = time.perf_counter() - t0
    return {"released": released, "release URLs/s": released / took if took else None}


def tails_part(args: Any) -> list[dict[str, Any]]:
    return [one_case(args, name, head, unpaced) for name, head, unpaced in CASES]


def arguments(p: Any) -> None:
    p.add_argument("--tails", action="store_true", help="heads and tails, side by side")
    p.add_argument("--hosts", type=int, default=1000, help="--tails: hosts")
    p.add_argument("--chunk", type=int, default=128, help="--tails: URLs per chunk")
    p.add_argument("--release", type=int, default=100_000, help="--tails: URLs released")
    p.add_argument(
        "--flush-seconds",
        type=float,
        default=30.0,
        help="--tails: frontier_flush_seconds, waited before the steady figures",
    )


def main(args: Any) -> int:
    _util.log(args, f"tails: {args.urls:,} URLs over {args.hosts:,} hosts, chunk {args.chunk}")
    rows = tails_part(args)
    title = f"Heads in Redis, tails in chunks: {args.urls:,} URLs pending over {args.hosts:,} hosts"
    _util.emit(args, {"tails": rows}, [_util.table(title, rows)])
    # The same URLs in every case, so the same pending count: at 10 M a few hundred-thousandths
    # are Bloom false positives (taken for duplicates, as designed), the same ones each time.
    pending = {r["pending"] for r in rows}
    return 0 if len(pending) == 1 and pending.pop() >= 0.999 * (args.urls + args.hosts) else 1
