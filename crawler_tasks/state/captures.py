"""Each URL's last full WARC capture in a schedule's runs (``P:sched:S:captures``), kept so
that the next run writes a ``revisit`` record instead of the same payload (worker/output/revisits.py),
without reading old WARC files back.

The field is an 8-byte BLAKE2b of the URL, not the URL: the value is 32 bytes (web/captures.py),
and a URL is often longer than that. 64 bits make a collision between two URLs of one schedule
unlikely below billions of URLs (one would at worst make a page whose payload digest happens
to match the other URL's written as a revisit of it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import redis

from ..web.captures import Capture
from .keys import Keys


def field_of(url: str) -> bytes:
    return hashlib.blake2b(url.encode("utf-8", "surrogateescape"), digest_size=8).digest()


class Captures:
    def __init__(self, client: redis.Redis, keys: Keys, schedule: str) -> None:
        self.client = client
        self.key = keys.schedule_captures(schedule)

    def get(self, url: str) -> Capture | None:
        raw = self.client.hget(self.key, field_of(url))
        return Capture.unpack(url, raw) if raw else None

    def put(self, url: str, capture: Capture) -> None:
        self.client.hset(self.key, field_of(url), capture.pack(url))

    def forget(self, urls: Iterable[str]) -> None:
        fields = [field_of(u) for u in urls]
        for i in range(0, len(fields), 1000):
            self.client.hdel(self.key, *fields[i : i + 1000])
