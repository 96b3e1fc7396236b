"""Frontier benchmark: Redis bytes per pending URL, and broker messages while 100k URLs wait.

    .venv/bin/python bench/frontier.py            # tables (about 2 minutes)
    .venv/bin/python bench/frontier.py --json     # the same figures as JSON
    .venv/bin/python bench/frontier.py --urls 20000 --sample-seconds 10   # a quicker run

Each part uses its own private ``redis-server`` (never the one on port 6379).

1. Memory: a crawl with no workers; 100,000 realistic URLs over 50 domains admitted through
   ``Frontier.admit`` (the path parse tasks use, 1,000 per call). Reported: ``INFO memory``
   ``used_memory`` delta per URL (the Bloom filter pre-allocated before the baseline, so its
   fixed allocation is reported apart), ``MEMORY USAGE`` of the per-domain queue lists per
   URL, the Bloom filter's allocation, and the admission rate. For scale, the bytes of one
   Celery fetch message sitting in the broker are measured too (2,000 sent to a scratch
   queue). Target: under 200 bytes per pending URL.
   Also the cost of admitting the outlinks of link-dense pages (150 navigation links repeated
   on every page + 30 random ones, ``--admit-pages`` pages): ms per page in the client and in
   Redis, with the repeats sent to Redis and with them recognised in-process (KnownURLs).
2. Broker load: 50 local sites (127.0.0.2-51, each response delayed ``--delay`` s), 100,000
   URLs pending, workers started (threads 16 + prefork 1; the dispatcher runs inside them),
   crawl rate ``--rate`` per domain and concurrency ``--concurrency``. Every 0.25 s: the
   broker queue lengths (``LLEN`` of crawl.high/medium/low/parse and their priority lists),
   unacked messages (``HLEN unacked``), URLs pending in the frontier and URLs done. The
   broker should hold about ``active domains x concurrency`` messages, not 100,000. Then the
   crawl is cancelled (``handle.cancel()``) and the time to drain it to "cancelled" is shown.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _frontier_tails
import _util
import redis
from _urls import realistic_urls

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from crawler_tasks.web.urls import normalize
from crawler_tasks.worker.process.app import QUEUES, make_app


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def memory_part(args: Any) -> dict[str, Any]:
    n = args.urls
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-frontier-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        urls = realistic_urls(n, args.domains)
        seeds = sorted({u.split("/", 3)[0] + "//" + u.split("/", 3)[2] + "/" for u in urls})
        crawl = start_crawl(seeds, settings=settings, client=client, output=tmp)
        frontier = crawl.store.frontier
        ck = crawl.ck.parts[0]  # a standalone Redis: one partition
        shape = crawl.options.bloom
        # The Bloom filter's fixed allocation: every shard grown to full size up front.
        before_bloom = used_memory(client)
        for i in range(shape.shards):
            client.setbit(ck.bloom(i), shape.shard_bits - 1, 0)
        bloom_bytes = sum(client.memory_usage(ck.bloom(i)) or 0 for i in range(shape.shards))
        bloom_delta = used_memory(client) - before_bloom
        queue_keys = [k for k in client.scan_iter(match=ck.queue_prefix + "*", count=1000)]
        seeds_bytes = sum(client.memory_usage(k, samples=0) or 0 for k in queue_keys)
        baseline = used_memory(client)
        start = time.perf_counter()
        admitted = 0
        for i in range(0, n, 1000):
            admitted += frontier.admit((u, 1) for u in urls[i : i + 1000]).admitted
        admit_s = time.perf_counter() - start
        after = used_memory(client)
        queue_keys = [k for k in client.scan_iter(match=ck.queue_prefix + "*", count=1000)]
        queue_bytes = sum(client.memory_usage(k, samples=0) or 0 for k in queue_keys) - seeds_bytes
        pending = sum(client.llen(k) for k in queue_keys)
        ready_bytes = client.memory_usage(ck.ready, samples=0) or 0
        url_chars = statistics.mean(len(u) for u in urls)
        # What the same backlog would cost as Celery messages in the broker.
        app = make_app(settings)
        scratch = "bench.scratch"
        msg_before = used_memory(client)
        for u in urls[:2000]:
            app.send_task("crawl.fetch", args=(crawl.id, u, 1), queue=scratch)
        msg_n = client.llen(scratch)
        msg_bytes = (used_memory(client) - msg_before) / max(msg_n, 1)
        msg_usage = (client.memory_usage(scratch, samples=0) or 0) / max(msg_n, 1)
        client.close()
    return {
        "urls_admitted": admitted,
        "domains": args.domains,
        "pending_in_queues": pending,
        "mean_url_chars": url_chars,
        "used_memory_delta_bytes": after - baseline,
        "bytes_per_url_used_memory": (after - baseline) / admitted,
        "bytes_per_url_queue_lists": queue_bytes / admitted,
        "ready_zset_bytes": ready_bytes,
        "bloom_capacity": shape.capacity,
        "bloom_error_rate": shape.error_rate,
        "bloom_allocated_bytes": bloom_bytes,
        "bloom_used_memory_delta": bloom_delta,
        "admit_urls_per_s": admitted / admit_s,
        "celery_message_bytes_used_memory": msg_bytes,
        "celery_message_bytes_memory_usage": msg_usage,
        "celery_messages_measured": msg_n,
    }


def link_dense_pages(pages: int, seed: int = 3) -> list[list[str]]:
    """Outlinks of ``pages`` pages of one site: the same 150 navigation links on every page
    plus 30 links to random pages (what bench/crawl.py's site looks like to a parser)."""
    rng = random.Random(seed)
    base = "http://www.docs.example.com"
    paths = ["/"] + [f"/d{i // 100}/p{i}" for i in range(1, pages)]
    out = []
    for _ in range(pages):
        links = paths[:150] + [paths[rng.randrange(pages)] for _ in range(30)]
        out.append([base + p for p in dict.fromkeys(links)])
    return out


def admission_part(args: Any) -> list[dict[str, Any]]:
    """ms per page to admit the outlinks of link-dense pages, with and without the process's
    KnownURLs (a crawl without a start time gets none), and Redis's share."""
    rows = []
    pages = link_dense_pages(args.admit_pages)
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-admit-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        for label, cached in (("repeats sent to Redis", False), ("repeats known in-process", True)):
            crawl = start_crawl(
                ["http://www.docs.example.com/"], settings=settings, client=client, output=tmp
            )
            frontier = crawl.store.frontier
            if not cached:
                frontier.opts = dataclasses.replace(frontier.opts, started_at=0.0)
            before = float(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))
            start = time.perf_counter()
            admitted = links = 0
            for outlinks in pages:
                admitted += frontier.admit((u, 1) for u in outlinks).admitted
                links += len(outlinks)
            wall = time.perf_counter() - start
            after = float(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))
            stats = crawl.stats.counters()
            rows.append(
                {
                    "case": label,
                    "pages": len(pages),
                    "links_per_page": links / len(pages),
                    "admitted": admitted,
                    "ms_per_page": wall / len(pages) * 1000,
                    "redis_ms_per_page": (after - before) / 1000 / len(pages),
                    "discovered": stats.get("discovered"),
                    "deduplicated": stats.get("deduplicated"),
                }
            )
        client.close()
    return rows


def broker_lengths(client: redis.Redis, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        total = 0
        for key in client.scan_iter(match=name + "*", count=100):
            if client.type(key) == b"list":
                total += client.llen(key)
        out[name] = total
    return out


def broker_part(args: Any) -> dict[str, Any]:
    from tests.support.sitegen import running_sites

    n = args.urls
    addresses = [f"127.0.0.{i}" for i in range(2, 2 + args.domains)]
    with (
        private_redis() as url,
        tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp,
        running_sites(addresses, pages_per_host=5, links_per_page=2, delay=args.delay) as (
            _graph,
            servers,
        ),
    ):
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        hosts = [s.base_url.split("//")[1].split(":")[0] for s in servers]
        seeds = [s.base_url + "/" for s in servers]
        crawl = start_crawl(
            seeds,
            settings=settings,
            client=client,
            output=tmp,
            allow_private_networks=True,
            allowed_domains=hosts,
            rate=args.rate,
            concurrency=args.concurrency,
        )
        # 404s on the sites: cheap to answer, fetched with the same politeness as any page.
        backlog = [
            f"{servers[i % len(servers)].base_url}/catalog/{i % 97}/item-{i}.html" for i in range(n)
        ]
        frontier = crawl.store.frontier
        for i in range(0, n, 1000):
            frontier.admit((normalize(u), 1) for u in backlog[i : i + 1000])
        samples: list[dict[str, Any]] = []
        log_dir = Path(tmp) / "logs"
        log_dir.mkdir()
        _util.log(args, f"{n:,} URLs pending; starting workers, sampling {args.sample_seconds}s")
        with local_workers(url, url, fetch_threads=16, parsers=1, log_dir=str(log_dir)):
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.sample_seconds:
                lengths = broker_lengths(client, list(QUEUES))
                stats = crawl.stats.counters()
                samples.append(
                    {
                        "t": round(time.monotonic() - t0, 2),
                        **{f"llen {q}": v for q, v in lengths.items()},
                        "broker_queued": sum(lengths.values()),
                        "unacked": client.hlen("unacked"),
                        "frontier_pending": stats.get("queued", 0),
                        "inflight": client.hlen(crawl.ck.parts[0].inflight),
                        "done": stats.get("done", 0),
                    }
                )
                time.sleep(0.25)
            _util.log(args, "cancelling")
            t1 = time.monotonic()
            crawl.cancel()
            try:
                summary = crawl.wait(timeout=args.cancel_timeout)
            except TimeoutError:
                summary = {"status": f"not final after {args.cancel_timeout:.0f}s"}
            cancel_s = time.monotonic() - t1
        requests = sum(len(s.log) for s in servers)
        client.close()
    steady = [s for s in samples if s["t"] >= 3.0] or samples
    busy = sum(1 for _ in hosts)
    broker_total = [s["broker_queued"] + s["unacked"] for s in steady]
    return {
        "urls_pending_at_start": n,
        "domains": len(hosts),
        "rate_per_domain": args.rate,
        "concurrency_per_domain": args.concurrency,
        "server_delay_s": args.delay,
        "bound_domains_x_concurrency": busy * args.concurrency,
        "broker_queued_max": max(s["broker_queued"] for s in samples),
        "broker_queued_mean": statistics.mean(s["broker_queued"] for s in steady),
        "unacked_max": max(s["unacked"] for s in samples),
        "unacked_mean": statistics.mean(s["unacked"] for s in steady),
        "broker_total_max": max(s["broker_queued"] + s["unacked"] for s in samples),
        "broker_total_mean": statistics.mean(broker_total),
        "frontier_pending_min": min(s["frontier_pending"] for s in samples),
        "done_in_window": samples[-1]["done"],
        "fetch_rate_per_s": samples[-1]["done"] / max(samples[-1]["t"], 1e-9),
        "http_requests_seen": requests,
        "cancel_to_final_s": cancel_s,
        "final_status": summary.get("status"),
        "final_counters": {
            k: v
            for k, v in summary.get("counters", {}).items()
            if k in ("done", "cancelled", "fetched", "admitted")
        },
        "samples": samples,
    }


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--urls", type=int, default=100_000)
    p.add_argument("--domains", type=int, default=50)
    p.add_argument("--rate", type=float, default=2.0, help="requests/s per domain")
    p.add_argument("--concurrency", type=int, default=2, help="in flight per domain")
    p.add_argument("--delay", type=float, default=0.3, help="seconds each response takes")
    p.add_argument("--sample-seconds", type=float, default=30.0)
    p.add_argument("--cancel-timeout", type=float, default=150.0)
    p.add_argument("--skip-broker", action="store_true", help="memory part only")
    p.add_argument("--admit-pages", type=int, default=3000, help="pages in the admission part")
    _frontier_tails.arguments(p)
    args = p.parse_args()
    if args.tails:
        return _frontier_tails.main(args)
    _util.log(args, f"memory: admitting {args.urls:,} URLs over {args.domains} domains")
    mem = memory_part(args)
    _util.log(args, f"admission: outlinks of {args.admit_pages:,} link-dense pages")
    admission = admission_part(args)
    result: dict[str, Any] = {"memory": mem, "admission": admission}
    tables = [
        _util.table(
            "Frontier memory per pending URL (no workers)",
            [
                {
                    "figure": "URLs admitted / domains",
                    "value": f"{mem['urls_admitted']:,} / {mem['domains']}",
                },
                {"figure": "mean URL length (chars)", "value": mem["mean_url_chars"]},
                {
                    "figure": "used_memory delta per URL (bytes)",
                    "value": mem["bytes_per_url_used_memory"],
                },
                {
                    "figure": "MEMORY USAGE of queue lists per URL (bytes)",
                    "value": mem["bytes_per_url_queue_lists"],
                },
                {"figure": "ready zset (bytes, whole)", "value": mem["ready_zset_bytes"]},
                {
                    "figure": f"Bloom filter, fixed ({mem['bloom_capacity']:,} URLs at "
                    f"p={mem['bloom_error_rate']}) bytes",
                    "value": mem["bloom_allocated_bytes"],
                },
                {
                    "figure": "admission rate, Frontier.admit (URLs/s)",
                    "value": mem["admit_urls_per_s"],
                },
                {
                    "figure": "one Celery fetch message in the broker (bytes, used_memory)",
                    "value": mem["celery_message_bytes_used_memory"],
                },
                {
                    "figure": "one Celery fetch message (bytes, MEMORY USAGE)",
                    "value": mem["celery_message_bytes_memory_usage"],
                },
            ],
        ),
    ]
    tables.append(
        _util.table(
            "Admitting a page's outlinks (150 repeated navigation links + 30 random per page)",
            admission,
        )
    )
    if not args.skip_broker:
        _util.log(args, "broker part")
        brk = broker_part(args)
        result["broker"] = brk
        summary = {k: v for k, v in brk.items() if k not in ("samples", "final_counters")}
        tables.append(
            _util.table(
                "Broker load while URLs are pending (workers running)",
                [{"figure": k, "value": v} for k, v in summary.items()]
                + [{"figure": "final counters", "value": brk["final_counters"]}],
            )
        )
        step = max(1, len(brk["samples"]) // 15)
        tables.append(
            _util.table(f"Samples (every ~0.25 s; every {step}th shown)", brk["samples"][::step])
        )
    _util.emit(args, result, tables)
    ok = mem["bytes_per_url_used_memory"] < 200 and (
        args.skip_broker or math.isfinite(result["broker"]["broker_total_max"])
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
