"""A crawl's index of page fingerprints (SimHash, web/simhash.py), for ``duplicate_of``.

One sorted set per crawl (``P:C:simhash``), every member at score 0 so it is ordered by its
bytes: ``band:hex16:fingerprint:url``, four members per page. The candidates of a fingerprint
are the members sharing one of its bands: four ZRANGEBYLEX prefix queries in one round trip.
A page that is no near-duplicate of any is added; a near-duplicate is not (duplicates point at
the first page of their group). Two near-duplicates parsed at the same moment may both be
taken as originals: the check and the add are two round trips, not one script.
"""

from __future__ import annotations

import redis

from ..web.simhash import MAX_DISTANCE, bands, distance
from .keys import CrawlKeys


class NearDuplicates:
    def __init__(self, client: redis.Redis, ck: CrawlKeys) -> None:
        self.client = client
        self.key = ck.simhash

    def check(self, url: str, fingerprint: int) -> str | None:
        """The URL of an earlier page within MAX_DISTANCE bits of ``fingerprint``, else None
        (and the page is added to the index)."""
        mine = bands(fingerprint)
        pipe = self.client.pipeline(transaction=False)
        for band in mine:
            pipe.zrangebylex(self.key, f"[{band}:", f"({band};")
        best: tuple[int, str] | None = None
        for members in pipe.execute():
            for raw in members:
                _band, _value, fp, other = raw.decode().split(":", 3)
                d = distance(int(fp, 16), fingerprint)
                if other != url and d <= MAX_DISTANCE and (best is None or (d, other) < best):
                    best = (d, other)
        if best is not None:
            return best[1]
        self.client.zadd(self.key, {f"{band}:{fingerprint:016x}:{url}": 0 for band in mine})
        return None
