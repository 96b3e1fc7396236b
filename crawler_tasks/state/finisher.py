"""The end of a crawl (worker/visit/recorder.py, ``crawl_finished``): one finisher at a time,
by a lock a finisher that died is taken over from; then the crawl's keys set to expire and its
final status written, once its summary and records are on disk."""

from __future__ import annotations

import redis

from .formats import Status
from .keys import CrawlKeys, Keys


class Finisher:
    """The finisher's lock of one crawl, and what the finisher does last."""

    def __init__(self, client: redis.Redis, keys: Keys, ck: CrawlKeys, crawl_id: str) -> None:
        self.client = client
        self.keys = keys  # the listing of running crawls
        self.ck = ck
        self.crawl_id = crawl_id

    def lock(self, worker: str, seconds: int) -> bool:
        """Take the finisher's lock if nobody holds it."""
        return bool(self.client.set(self.ck.finisher, worker, nx=True, ex=seconds))

    def holder(self) -> str | None:
        """The worker process holding the finisher's lock."""
        raw = self.client.get(self.ck.finisher)
        return None if raw is None else raw.decode()

    def take(self, worker: str, seconds: int) -> None:
        """Take over the lock of a finisher that died."""
        self.client.set(self.ck.finisher, worker, ex=seconds)

    def unlock(self) -> None:
        self.client.delete(self.ck.finisher)

    def expire(self, seconds: int) -> None:
        """Every key of the crawl expires in ``seconds`` (a finished crawl)."""
        for pattern in self.ck.patterns:
            for key in self.client.scan_iter(match=pattern, count=1000):
                self.client.expire(key, seconds)

    def finished(self, final: Status) -> None:
        """The crawl's final status, once its summary and records are written."""
        # The crawl's keys share a slot, the listing of running crawls does not (Redis
        # Cluster): status first, so a finisher dying in between leaves a finished crawl that
        # is still listed (harmless: nothing to release), never a running one that is not.
        pipe = self.client.pipeline()
        pipe.hset(self.ck.state, "status", final.value)
        pipe.delete(self.ck.finisher)
        pipe.execute()
        self.client.srem(self.keys.running, self.crawl_id)
        # Every process with segments of this crawl staged uploads them now, not at its next
        # tick (worker/output/uploads.py); a process that misses it still finds the final
        # status within a tick.
        self.client.publish(self.ck.ended, final.value)
