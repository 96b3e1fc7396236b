"""Fetched bodies waiting for their parse task: one hash per URL (``CrawlKeys.body``) with the
response's metadata (JSON) and its body, expiring after ``body_ttl`` seconds so a body whose
parse task never runs cannot stay forever. Passing a key instead of the body keeps task
messages small (bench/bodies.py measured it cheaper than a body in the message)."""

from __future__ import annotations

import json
from typing import Any

import redis

from .keys import CrawlKeys


class BodyStash:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, ttl: int) -> None:
        self.client, self.ck, self.ttl = client, ck, ttl

    def put(self, url: str, meta: str, body: bytes) -> None:
        key = self.ck.body(url)
        pipe = self.client.pipeline()
        pipe.hset(key, mapping={"meta": meta, "body": body})
        pipe.expire(key, self.ttl)
        pipe.execute()

    def get(self, url: str) -> tuple[dict[str, Any], bytes] | None:
        meta, body = self.client.hmget(self.ck.body(url), "meta", "body")
        if meta is None or body is None:
            return None
        return json.loads(meta), body

    def drop(self, url: str) -> None:
        self.client.delete(self.ck.body(url))
