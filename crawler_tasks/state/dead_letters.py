"""A crawl's dead letters (``CrawlKeys.failed``): the record of each URL that failed for good
or whose extraction (or ``on_item`` task) failed, read by ``crawler failed`` and replayed by
``crawler retry-failed``.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from . import archive, formats
from .formats import Counter
from .keys import CrawlKeys


class DeadLetters:
    def __init__(self, client: redis.Redis, ck: CrawlKeys) -> None:
        self.client = client
        self.ck = ck

    def add(self, url: str, record: dict[str, Any]) -> None:
        """``url``'s record in its dead-letter hash (replaced if it had one)."""
        self.client.hset(self.ck.for_url(url).failed, url, json.dumps(record))

    def all(self) -> list[dict[str, Any]]:
        """Every dead letter of the crawl, from every partition."""
        return [json.loads(v) for pk in self.ck.parts for v in self.client.hvals(pk.failed)]

    def replay(self, records: list[dict[str, Any]]) -> None:
        """Take ``records`` (dead letters) off the dead-letter hashes and off the counters
        their final state added: the replayed URLs are counted again at their new one, and
        their new response is archived too (a new attempt on purpose, like its new record)."""
        pipe = self.client.pipeline(transaction=False)
        for r in records:  # each record's counters are in its URL's partition
            pk = self.ck.for_url(r["url"])
            if r.get("error"):
                pipe.hincrby(pk.stats, formats.failed(r["error"]), -1)
                pipe.hincrby(pk.stats, Counter.FAILED.value, -1)
            else:  # recorded, but its extraction (or on_item task) failed
                pipe.hincrby(pk.stats, Counter.EXTRACT_ERRORS.value, -1)
            pipe.hincrby(pk.stats, Counter.DONE.value, -1)
            pipe.hdel(pk.failed, r["url"])
            pipe.hdel(pk.archived, *(archive.field(kind, r["url"]) for kind in archive.KINDS))
        pipe.execute()
