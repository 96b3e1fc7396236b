"""Memory at scale: Redis bytes per pending URL at millions of URLs, and what 100 M / 1 B need.

    .venv/bin/python bench/memory.py                     # 10 M URLs over 100,000 domains
    .venv/bin/python bench/memory.py --urls 1000000      # a quicker run
    .venv/bin/python bench/memory.py --urls 1000000 --list-compress-depth 1   # a list setting
    .venv/bin/python bench/memory.py --json

A private ``redis-server`` (free loopback port, nothing persisted) and a crawl created through
``start_crawl`` with its Bloom filter sized for ``--urls`` (the default error rate). No
workers: the URLs are admitted the way a parse task admits a page's links, through the
crawl's ``Admission.links`` (scope check, the process's KnownURLs, admit.lua in batches of
1,000), one call per generated "page" of ``--links`` links (90 % to the page's own domain).
Domains get URLs by a Zipf law (``--skew``, 0 = uniform): a few big sites, a long tail.
URLs look like shop, news and blog URLs of 60-90 characters.

Reported: ``used_memory`` before and after; bytes per pending URL split into the frontier
(per-domain queue lists and the ready zset by ``MEMORY USAGE``, their share of the keyspace's
hash table by ``MEMORY STATS``), the Bloom filter, and the rest (counters, allocator rounding
that ``MEMORY USAGE`` does not see); admission rate (URLs/s of ``Admission.links``, URL
generation excluded) and Redis's own µs per URL. Then one release round over ``--release``
domains measures what a domain that has been fetched once keeps (its politeness hash,
``dom:D``, kept for the crawl's life) and what an in-flight URL costs, and
``--simhash-pages`` fingerprints what the near-duplicate index keeps per fetched page
(``near_duplicates`` crawls only; it grows with pages done, not pending). Last, the
extrapolation to 100 M and 1 B pending URLs at the same URLs per domain: GB, and 64 GB Redis
nodes filled to ``--fill`` (default 0.75: headroom for the fork of an AOF rewrite or
replica sync, client buffers and fragmentation).

``--list-max-listpack-size`` / ``--list-compress-depth`` are set with CONFIG SET before
anything is admitted (Redis defaults: -2, i.e. 8 KB per list node, and 0, no compression).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import _util
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.state.bloom import KnownURLs
from crawler_tasks.state.neardup import NearDuplicates
from crawler_tasks.state.store import CrawlStore
from crawler_tasks.surface.embedded import private_redis
from crawler_tasks.worker.runtime.context import KNOWN_MAX

WORDS = (  # noqa: SIM905 - one line of words reads better than 24 lines
    "summer linen shirt classic blue garden chair oak table lamp vintage leather boots wool "
    "scarf ceramic mug travel kitchen outdoor running jacket coffee desk sofa"
).split()
TLDS = ("com", "org", "net", "de", "co.uk")
GB = 1e9
NODE_BYTES = 64 * 2**30


def host(d: int) -> str:
    kind, tld = d % 3, TLDS[d % len(TLDS)]
    return (f"www.shop{d}", f"www.news{d}", f"blog.site{d}")[kind] + "." + tld


def url_of(d: int, n: int) -> str:
    """The n-th URL of domain d, already in the crawler's normal form (60-90 characters)."""
    a, b, c = WORDS[n % 24], WORDS[(n // 24) % 24], WORDS[(d + n // 576) % 24]
    kind = d % 3
    if kind == 0:
        return f"https://{host(d)}/en-gb/{a}/{b}-{c}-{a}-{n}.html?variant={n % 7}"
    if kind == 1:
        return f"https://{host(d)}/world/{2020 + n % 5}/{n % 12 + 1:02d}/{a}-{b}-{c}-{a}-{n}/"
    return f"https://{host(d)}/posts/{n}/{a}-{b}-{c}?utm_source=feed"


class Web:
    """Pages of links to new URLs, domains drawn by a Zipf law of exponent ``skew``."""

    def __init__(self, domains: int, skew: float, links: int, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.cum = list(itertools.accumulate(1 / (r + 1) ** skew for r in range(domains)))
        self.next = [0] * domains
        self.links = links

    def domain(self) -> int:
        return bisect.bisect(self.cum, self.rng.random() * self.cum[-1])

    def pages(self, total: int) -> Iterator[list[str]]:
        made = 0
        while made < total:
            home, out = self.domain(), []
            for _ in range(min(self.links, total - made)):
                d = home if self.rng.random() < 0.9 else self.domain()
                out.append(url_of(d, self.next[d]))
                self.next[d] += 1
            made += len(out)
            yield out


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def main_dict(client: redis.Redis) -> int:
    """Bytes of the keyspace's own hash table (one entry per key)."""
    stats = client.memory_stats()
    db = stats.get("db.0") or {}
    return int(db.get("overhead.hashtable.main", 0))


def usage(client: redis.Redis, keys: list[bytes]) -> int:
    total = 0
    for i in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for k in keys[i : i + 1000]:
            pipe.memory_usage(k, samples=0)
        total += sum(v or 0 for v in pipe.execute())
    return total


def list_fit(client: redis.Redis, keys: list[bytes]) -> tuple[float, float]:
    """Least squares over the queue lists: MEMORY USAGE = per list + per entry x LLEN."""
    xs, ys = [], []
    for i in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for k in keys[i : i + 1000]:
            pipe.llen(k)
            pipe.memory_usage(k, samples=0)
        out = pipe.execute()
        xs += [float(n) for n in out[0::2]]
        ys += [float(b or 0) for b in out[1::2]]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def scan(client: redis.Redis, pattern: str) -> list[bytes]:
    return list(client.scan_iter(match=pattern, count=5000))


def evalsha_usec(client: redis.Redis) -> float:
    return float(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def admit_all(args: Any, store: CrawlStore) -> dict[str, float]:
    web = Web(args.domains, args.skew, args.links)
    links_s = gen_s = 0.0
    done, chars, t0 = 0, 0, time.perf_counter()
    report = max(args.urls // 10, 1)
    for page in web.pages(args.urls):
        t1 = time.perf_counter()
        store.admission.links(page, 1)
        t2 = time.perf_counter()
        links_s += t2 - t1
        done += len(page)
        chars += sum(len(u) for u in page)
        if done // report != (done - len(page)) // report:
            _util.log(args, f"{done:,} URLs admitted ({done / links_s:,.0f}/s)")
    gen_s = time.perf_counter() - t0 - links_s
    return {"links_s": links_s, "gen_s": gen_s, "mean_url_chars": chars / max(done, 1)}


def release_sample(client: redis.Redis, store: CrawlStore, n: int) -> dict[str, float]:
    """One release round over ``n`` domains: bytes a released domain keeps (``dom:D``) and an
    in-flight URL costs (inflight entry + lease), from ``used_memory``."""
    ck = store.ck.parts[0]  # a standalone Redis: one partition
    before = used(client)
    out = store.frontier.release_all(n, 3600, worker="bench", budget=n)
    after = used(client)
    released = len(out.entries)
    doms = scan(client, ck.domain_prefix + "*")
    dom_bytes = usage(client, doms)
    lease_bytes = usage(client, scan(client, ck.lease_prefix + "*"))
    return {
        "released": released,
        "dom_hash_bytes": dom_bytes / max(len(doms), 1),
        "inflight_url_bytes": (after - before - dom_bytes) / max(released, 1),
        "lease_bytes": lease_bytes / max(released, 1),
    }


def simhash_sample(client: redis.Redis, store: CrawlStore, n: int) -> float:
    """Bytes per page of the near-duplicate index (``near_duplicates`` crawls: four members
    a page, kept for the crawl's life, like the Bloom filter but per fetched page)."""
    rng, index = random.Random(7), NearDuplicates(client, store.ck)
    web = Web(1000, 1.0, 100, seed=9)
    urls = [u for page in web.pages(n) for u in page]
    for url in urls:
        index.check(url, rng.getrandbits(64))
    return float(client.memory_usage(store.ck.simhash, samples=0) or 0) / len(urls)


LIST_SETTINGS = ("list-max-listpack-size", "list-compress-depth")


def new_crawl(args: Any, url: str, client: redis.Redis, tmp: str) -> CrawlStore:
    """The list settings asked for, then a crawl whose Bloom filter is sized for ``--urls``,
    as a worker process holds it (KnownURLs, see context.Context.store)."""
    for name in LIST_SETTINGS:
        value = getattr(args, name.replace("-", "_"))
        if value is not None:
            client.config_set(name, value)
    settings = load(env={}, broker_url=url, output_dir=tmp, bloom_capacity=args.urls)
    crawl = start_crawl(
        [f"https://{host(0)}/"],
        settings=settings,
        client=client,
        output=tmp,
        allowed_domains=list(TLDS),
    )
    return CrawlStore(crawl.store.r, crawl.options, known=KnownURLs(KNOWN_MAX))


def measure(args: Any) -> dict[str, Any]:
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        client = redis.Redis.from_url(url)
        empty = used(client)
        store = new_crawl(args, url, client, tmp)
        config = {k: client.config_get(k)[k] for k in LIST_SETTINGS}
        ck, shape = store.ck.parts[0], store.opts.bloom  # a standalone Redis: one partition
        base, base_dict, usec0 = used(client), main_dict(client), evalsha_usec(client)
        base_lists = usage(client, scan(client, ck.queue_prefix + "*"))
        times = admit_all(args, store)
        after, after_dict = used(client), main_dict(client)
        redis_us = (evalsha_usec(client) - usec0) / args.urls
        queues = scan(client, ck.queue_prefix + "*")
        pending = sum(client.llen(k) for k in queues)
        lists = usage(client, queues) - base_lists
        per_list, per_entry = list_fit(client, queues)
        ready = client.memory_usage(ck.ready, samples=0) or 0
        bloom = usage(client, [ck.bloom(i).encode() for i in range(shape.shards)])
        encodings = {client.object("encoding", k) for k in queues[:1000]}
        counters = store.stats.counters()
        dict_bytes = after_dict - base_dict
        release = release_sample(client, store, args.release)
        simhash = simhash_sample(client, store, args.simhash_pages)
        client.close()
    delta = after - base
    return {
        "urls": args.urls,
        "domains_given": args.domains,
        "domains_with_urls": len(queues),
        "skew": args.skew,
        "links_per_page": args.links,
        "pending": pending,
        "admitted": counters.get("admitted", 0) - 1,  # the seed
        "mean_url_chars": times["mean_url_chars"],
        "redis_config": {k: str(v) for k, v in config.items()},
        "list_encodings": sorted(str(e) for e in encodings),
        "used_memory_empty": empty,
        "used_memory_before": base,
        "used_memory_after": after,
        "used_memory_delta": delta,
        "bytes_queue_lists": lists,
        "list_fit_bytes_per_list": per_list,
        "list_fit_bytes_per_entry": per_entry,
        "bytes_ready_zset": ready,
        "bytes_keyspace_table": dict_bytes,
        "bytes_bloom": bloom,
        "bytes_rest": delta - lists - ready - dict_bytes - bloom,
        "bloom_capacity": shape.capacity,
        "bloom_error_rate": shape.error_rate,
        "admit_urls_per_s": args.urls / times["links_s"],
        "admit_seconds": times["links_s"],
        "generate_seconds": times["gen_s"],
        "redis_us_per_url": redis_us,
        **{f"release_{k}": v for k, v in release.items()},
        "simhash_bytes_per_page": simhash,
    }


def per_url(r: dict[str, Any]) -> dict[str, float]:
    n = r["pending"]
    frontier = (r["bytes_queue_lists"] + r["bytes_ready_zset"] + r["bytes_keyspace_table"]) / n
    domains_per_url = r["domains_with_urls"] / n
    return {
        "frontier": frontier,
        "queue_lists": r["bytes_queue_lists"] / n,
        "ready_zset": r["bytes_ready_zset"] / n,
        "keyspace_table": r["bytes_keyspace_table"] / n,
        "domain_hashes": r["release_dom_hash_bytes"] * domains_per_url,
        "bloom": r["bytes_bloom"] / n,
        "rest": r["bytes_rest"] / n,
        "total_used_memory": r["used_memory_delta"] / n,
    }


def per_domain(r: dict[str, Any]) -> float:
    """What a domain costs whatever its URLs: its list (fitted), its ready zset entry, its
    key in the keyspace table, its politeness hash."""
    d = r["domains_with_urls"]
    fixed = r["bytes_ready_zset"] + r["bytes_keyspace_table"]
    return float(r["list_fit_bytes_per_list"] + fixed / d + r["release_dom_hash_bytes"])


def extrapolate(r: dict[str, Any], fill: float, ratios: list[float]) -> list[dict[str, Any]]:
    """Bloom sized for N at the same error rate (bits per URL fixed), every domain with a
    politeness hash (fetched at least once). First at the measured URLs per domain (scaled
    from the measured total), then at each of ``ratios`` pending URLs per domain (per-entry and
    per-domain costs from the fit)."""
    b = per_url(r)
    measured = r["pending"] / r["domains_with_urls"]
    rows = []
    for ratio in [measured, *ratios]:
        for n in (10_000_000, 100_000_000, 1_000_000_000):
            domains = n / ratio
            if ratio == measured:
                frontier = n * (b["frontier"] + b["domain_hashes"])
                total = n * (b["total_used_memory"] + b["domain_hashes"])
            else:
                frontier = n * r["list_fit_bytes_per_entry"] + domains * per_domain(r)
                total = frontier + n * (b["bloom"] + max(b["rest"], 0.0))
            rows.append(
                {
                    "URLs/domain": ratio,
                    "pending URLs": n,
                    "domains": round(domains),
                    "frontier GB": frontier / GB,
                    "bloom GB": n * b["bloom"] / GB,
                    "total GB": total / GB,
                    "64 GB nodes": math.ceil(total / (NODE_BYTES * fill)),
                }
            )
    return rows


def render(r: dict[str, Any], b: dict[str, float], fill: float) -> list[str]:
    mb = 1 / 2**20
    run = [
        {
            "pending": r["pending"],
            "domains": r["domains_with_urls"],
            "URL chars": r["mean_url_chars"],
            "used_memory before MB": r["used_memory_before"] * mb,
            "after MB": r["used_memory_after"] * mb,
            "admit URLs/s": r["admit_urls_per_s"],
            "Redis us/URL": r["redis_us_per_url"],
            "list config": " ".join(f"{k}={v}" for k, v in r["redis_config"].items()),
            "encoding": ",".join(r["list_encodings"]),
        }
    ]
    split = [{"part": f"per pending URL: {k}", "bytes": v} for k, v in b.items()]
    split += [
        {"part": "per pending URL: list entry (fit)", "bytes": r["list_fit_bytes_per_entry"]},
        {"part": "per domain: list (fit)", "bytes": r["list_fit_bytes_per_list"]},
        {"part": "per domain: list + zset + key + dom:D", "bytes": r["bytes_per_domain"]},
    ]
    release = [
        {
            "domains released": r["release_released"],
            "dom:D hash bytes/domain": r["release_dom_hash_bytes"],
            "in-flight URL bytes": r["release_inflight_url_bytes"],
            "of which lease bytes": r["release_lease_bytes"],
            "near-dup index bytes/page": r["simhash_bytes_per_page"],
        }
    ]
    return [
        _util.table("Admission run", run),
        _util.table(
            "Bytes (frontier = queue lists + ready zset + keyspace table; domain_hashes: "
            "dom:D once every domain was fetched, not in total_used_memory; fit: least "
            "squares of MEMORY USAGE over LLEN of the queue lists)",
            split,
        ),
        _util.table("One release round; the near-duplicate index", release),
        _util.table(
            f"Extrapolation (measured URLs per domain, then --ratios; nodes filled to {fill:.0%})",
            r["extrapolation"],
        ),
    ]


def measure_cluster(args: Any) -> dict[str, Any]:
    """The same admission into a crawl on a 3-master Redis Cluster (tests/support/cluster.py): bytes
    per pending URL over all masters, and how evenly the partitions spread them."""
    from tests.support.cluster import Cluster

    cluster = Cluster(masters=3)
    try:
        with private_redis() as broker, tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp:
            masters = cluster.masters()
            before = [int(n.info("memory")["used_memory"]) for n in masters]
            settings = load(
                env={},
                broker_url=broker,
                redis_url=cluster.url,
                output_dir=tmp,
                bloom_capacity=args.urls,
            )
            crawl = start_crawl(
                [f"https://{host(0)}/"], settings=settings, output=tmp, allowed_domains=list(TLDS)
            )
            store = CrawlStore(crawl.store.r, crawl.options, known=KnownURLs(KNOWN_MAX))
            times = admit_all(args, store)
            after = [int(n.info("memory")["used_memory"]) for n in masters]
            pending = store.stats.counters().get("queued", 0)
            shape = store.opts.bloom
    finally:
        cluster.stop()
    grew = [a - b for a, b in zip(after, before, strict=True)]
    bloom = shape.bits // 8 * store.opts.partitions
    return {
        "pending": pending,
        "partitions": store.opts.partitions,
        "grew_mb_by_master": [round(g / 2**20, 1) for g in grew],
        "bytes_per_url": sum(grew) / max(pending, 1),
        "bloom_bytes_per_url": bloom / max(pending, 1),
        "admit_urls_per_s": pending / max(times["links_s"], 1e-9),
    }


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--cluster", action="store_true", help="on a 3-master Redis Cluster")
    p.add_argument("--urls", type=int, default=10_000_000)
    p.add_argument("--domains", type=int, default=100_000)
    p.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of URLs per domain")
    p.add_argument("--links", type=int, default=100, help="links per page (one admission call)")
    p.add_argument("--release", type=int, default=1000, help="domains released once")
    p.add_argument("--simhash-pages", type=int, default=20000, help="pages fingerprinted")
    p.add_argument("--fill", type=float, default=0.75, help="usable fraction of a node")
    p.add_argument(
        "--ratios", default="10", help="pending URLs per domain to extrapolate at too (a,b,...)"
    )
    p.add_argument("--list-max-listpack-size", type=int, default=None)
    p.add_argument("--list-compress-depth", type=int, default=None)
    args = p.parse_args()
    if args.urls < 1000 or args.domains < 1 or args.links < 1 or not 0 < args.fill <= 1:
        print(
            "error: --urls >= 1000, --domains >= 1, --links >= 1, 0 < --fill <= 1", file=sys.stderr
        )
        return 2
    if args.cluster:
        c = measure_cluster(args)
        _util.emit(args, c, [_util.table("Admission into a 3-master cluster", [c])])
        return 0
    r = measure(args)
    b = per_url(r)
    r["bytes_per_url"] = b
    ratios = [float(x) for x in args.ratios.split(",") if x]
    if r["redis_config"]["list-compress-depth"] != "0":
        ratios = []  # compressed lists cost no straight line of their length: no fit
    r["extrapolation"] = extrapolate(r, args.fill, ratios)
    r["bytes_per_domain"] = per_domain(r)
    _util.emit(args, r, render(r, b, args.fill))
    return 0


if __name__ == "__main__":
    sys.exit(main())
