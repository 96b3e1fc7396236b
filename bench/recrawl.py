"""Incremental recrawls (issue 35): two runs of one schedule over a site of ``--pages`` HTML
pages (tests/support/sitegen.py, one host, no 404s, ``--page-bytes`` of text each) where
``--change`` of the pages change between the runs and ``--new`` pages appear; every other page has
an ETag (and answers 304 to it), the rest send the same payload again. Prints, per run: WARC bytes,
response / revisit records (by profile); run 2's WARC bytes as a share of run 1's; whether run 2 has
full responses exactly for the changed and new pages; ``warcio check`` and revisits not resolved by
cdxj-indexer's index of run 1 (must be 0); Redis bytes per URL of what a schedule keeps between runs
(``MEMORY USAGE`` of the captures and validators hashes over their entries)."""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import _util
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.support.recrawl_site import (
    change_site,
    half_with_etags,
    serve,
    unresolved,
    warc_records,
    warcio_check,
    with_text,
)
from tests.support.sitegen import running_sites

ADDRESS = "127.0.0.31"


def one_run(settings: Any, client: redis.Redis, server: Any, timeout: float) -> Any:
    crawl = start_crawl(
        [server.base_url + "/"],
        settings=settings,
        client=client,
        output=settings.output_dir,
        schedule="bench",
        rates={ADDRESS: math.inf},
        allow_private_networks=True,
        allowed_domains=[ADDRESS],
        rate=math.inf,
        concurrency=16,
    )
    summary = crawl.wait(timeout=timeout)
    if summary.get("status") != "finished":
        raise SystemExit(f"run {crawl.id}: {summary.get('status')}")
    return crawl


def warc_figures(directory: Path) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    full: set[str] = set()
    for _, records in warc_records(directory):
        for r in records:
            if r.type == "revisit":
                kinds["revisit " + r.headers["WARC-Profile"].rsplit("/", 1)[-1]] += 1
            elif r.type in ("response", "warcinfo"):
                kinds[r.type] += 1
                full.add(r.uri)
    size = sum(p.stat().st_size for p in directory.glob("crawl-*.warc.gz"))
    return {"warc_bytes": size, **dict(sorted(kinds.items())), "_full": full}


def per_url(client: redis.Redis, key: str) -> float:
    n = client.hlen(key)
    return (client.memory_usage(key, samples=0) or 0) / n if n else 0.0


def measure(args: Any) -> dict[str, Any]:
    with (
        private_redis() as url,
        tempfile.TemporaryDirectory(prefix="bench-recrawl-") as tmp,
        running_sites([ADDRESS], args.pages, 8, broken_ratio=0, cross_host_ratio=0) as (
            graph,
            (server,),
        ),
    ):
        server.etags = half_with_etags
        render = with_text(args.page_bytes)
        serve(graph, server, render)
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        with local_workers(url, url, log_dir=tmp, fetchers=1):
            first = one_run(settings, client, server, args.timeout)
            changed, added = change_site(graph, server, args.change, args.new, render=render)
            second = one_run(settings, client, server, args.timeout)
        keys = Keys(settings.key_prefix)
        runs = [warc_figures(Path(c.output_dir)) for c in (first, second)]
        full = runs[1].pop("_full") - {""}
        runs[0].pop("_full")
        result = {
            "pages": args.pages,
            "page_bytes": args.page_bytes,
            "changed": len(changed),
            "new": len(added),
            "runs": runs,
            "run2_share_of_run1_bytes": runs[1]["warc_bytes"] / runs[0]["warc_bytes"],
            "run2_full_exactly_changed_and_new": full == changed | added,
            "warcio_check_failures": sum(
                bool(warcio_check(Path(c.output_dir))) for c in (first, second)
            ),
            "unresolved_revisits": len(unresolved(Path(first.output_dir), Path(second.output_dir))),
            "redis_bytes_per_url_captures": per_url(client, keys.schedule_captures("bench")),
            "redis_bytes_per_url_validators": per_url(client, keys.schedule_validators("bench")),
        }
        client.close()
    return result


def main() -> int:
    ap = _util.parser(__doc__)
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--change", type=float, default=0.10, help="share of pages changed")
    ap.add_argument("--new", type=int, default=10, help="pages added by run 2")
    ap.add_argument("--page-bytes", type=int, default=30000, help="text added to each page")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    result = measure(args)
    rows = [{"run": i + 1, **r} for i, r in enumerate(result["runs"])]
    figures = {k: v for k, v in result.items() if k != "runs"}
    tables = [
        _util.table("WARC records per run", rows),
        _util.table("Run 2 against run 1", [figures]),
    ]
    _util.emit(args, result, tables)
    ok = result["run2_full_exactly_changed_and_new"] and not result["unresolved_revisits"]
    return 0 if ok and not result["warcio_check_failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
