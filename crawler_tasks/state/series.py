"""A crawl's figures over time: pages/s and errors/s for the dashboard's chart.

Who samples: the dispatcher of every worker, in its repair round (every couple of seconds),
so a crawl is sampled while it runs whether or not anyone has a dashboard open. Of all the
dispatchers of the cluster only one samples each interval: a SET NX PX on the crawl's
``sampled`` key is the turn, and only its taker reads the counters (the others pay one SET).
Rates are not stored: each sample is the crawl's cumulative counters at a time, and a rate is
the difference of two samples over their time apart, so a sample missed (no worker for a
while) costs resolution, never a wrong figure.

The series is one capped list under the crawl's tag (``keys.CrawlKeys.series``), so it expires
and is deleted with every other key of the crawl (``CrawlLifecycle.expire``'s patterns).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from .formats import Counter
from .keys import CrawlKeys
from .scripts import Scripts
from .stats import Stats

#: Seconds between two samples of a crawl (cluster-wide).
SAMPLE_EVERY = 5.0
#: Samples kept per crawl: two hours at SAMPLE_EVERY (~60 KB of Redis a crawl).
SAMPLES_KEPT = 1440
#: What a sample holds after its time, in this order (a JSON list: a third of a dict's size).
FIELDS = (Counter.DONE, Counter.FAILED, Counter.EXTRACT_ERRORS, Counter.ITEMS)


class Series:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, stats: Stats, scripts: Scripts) -> None:
        self.client, self.ck, self.stats, self.scripts = client, ck, stats, scripts
        #: Monotonic time before which this process does not even ask for the turn (the
        #: dispatcher's repair round runs every 2 s; a sample is due every SAMPLE_EVERY).
        self._next_try = 0.0

    def sample(
        self, now: float | None = None, every: float = SAMPLE_EVERY, force: bool = False
    ) -> bool:
        """Take this interval's sample unless another process did; True if this one did.
        ``force``: a sample of a moment that happens once (the crawl's start and end)."""
        if not force:
            if time.monotonic() < self._next_try:
                return False
            self._next_try = time.monotonic() + every / 2
        taken = self.client.set(self.ck.sampled, "1", nx=True, px=int(every * 1000))
        if not (taken or force):
            return False
        c = self.stats.counters()
        point = [round(now or time.time(), 3), *(c.get(f.value, 0) for f in FIELDS)]
        self.scripts.sample(
            keys=[self.ck.series], args=[json.dumps(point), SAMPLES_KEPT], client=self.client
        )
        return True

    def points(self, last: int = SAMPLES_KEPT) -> list[list[float]]:
        """The newest ``last`` samples, oldest first: ``[t, done, failed, extract_errors,
        items]``."""
        return [json.loads(raw) for raw in self.client.lrange(self.ck.series, -last, -1)]

    def rates(self, last: int = SAMPLES_KEPT, live: bool = False) -> list[dict[str, Any]]:
        """Pages/s and errors/s between consecutive samples, at the later one's time. A
        counter that went down (retry_failed takes replayed URLs off ``failed``) counts 0.
        ``live``: the counters now count as one more sample (the chart moves between two
        samples; nothing is written)."""
        pts = self.points(last + 1)
        if live and pts and time.time() - pts[-1][0] >= 1.0:
            c = self.stats.counters()
            pts.append([time.time(), *(c.get(f.value, 0) for f in FIELDS)])
        out = []
        for a, b in zip(pts, pts[1:], strict=False):
            dt = b[0] - a[0]
            if dt <= 0:
                continue
            out.append(
                {
                    "t": b[0],
                    "pages_per_s": round(max(b[1] - a[1], 0) / dt, 3),
                    "errors_per_s": round(max(b[2] - a[2], 0) / dt, 3),
                }
            )
        return out
