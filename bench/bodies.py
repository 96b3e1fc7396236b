"""Page bodies in broker messages, or in Redis under a key?

    python bench/bodies.py [--pages 2000] [--size 60000] [--json]

Publishes N parse messages the two ways into a private Redis with the crawler's Celery config
and reports publish time per page, Redis bytes per queued page and the time to take a message
back and get the body. What the crawler does: (b) body under a key, (crawl_id, url, depth) in
the message.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time

import redis

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from crawler_tasks.settings import load  # noqa: E402
from crawler_tasks.surface.embedded import private_redis  # noqa: E402
from crawler_tasks.worker.process.app import make_app  # noqa: E402


def page(i: int, size: int) -> bytes:
    link = f'<li><a href="/docs/section-{i % 50}/page-{{}}.html">Page {{}}</a></li>\n'
    out = "".join(link.format(j, j) for j in range(size // 70))
    return f"<html><head><title>Page {i}</title></head><body><ul>{out}</ul></body></html>".encode()


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def run(n: int, size: int) -> dict[str, dict[str, float]]:
    results = {}
    with private_redis() as url:
        app = make_app(load(env={}, broker_url=url))
        client = redis.Redis.from_url(url)
        bodies = [page(i, size) for i in range(n)]
        for mode in ("body_in_message", "body_under_key"):
            client.flushall()
            base = used(client)
            t0 = time.perf_counter()
            with app.producer_or_acquire() as producer:
                for i, body in enumerate(bodies):
                    u = f"https://example.org/p/{i}"
                    if mode == "body_in_message":
                        args = ("crawl-1", u, 1, body.decode("latin-1"))
                    else:
                        client.hset(f"b:{i}", mapping={"meta": "{}", "body": body})
                        args = ("crawl-1", u, 1)
                    app.send_task("crawl.parse", args, queue="parse", producer=producer)
            publish = (time.perf_counter() - t0) / n
            per_page = (used(client) - base) / n
            t0 = time.perf_counter()
            for i in range(n):
                raw = json.loads(client.rpop("parse"))
                args = json.loads(base64.b64decode(raw["body"]))[0]
                if mode == "body_under_key":
                    client.hmget(f"b:{i}", "meta", "body")
                    client.delete(f"b:{i}")
                else:
                    args[3].encode("latin-1")
            take = (time.perf_counter() - t0) / n
            results[mode] = {
                "publish_ms": publish * 1e3,
                "redis_bytes_per_page": per_page,
                "take_ms": take * 1e3,
            }
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--size", type=int, default=60000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.pages, a.size)
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{a.pages} pages of {a.size} bytes")
    print(f"{'mode':<18}{'publish ms':>12}{'Redis B/page':>14}{'take ms':>10}")
    for mode, r in res.items():
        print(
            f"{mode:<18}{r['publish_ms']:>12.3f}{r['redis_bytes_per_page']:>14.0f}{r['take_ms']:>10.3f}"
        )


if __name__ == "__main__":
    main()
