"""Which URLs of a crawl are sitemap files, and which origins' robots.txt ``Sitemap:`` lines
it has taken (``sitemaps=True`` crawls; worker/visit/sitemap_seeds.py does the rest)."""

from __future__ import annotations

import redis

from .keys import CrawlKeys


class SitemapMarks:
    def __init__(self, client: redis.Redis, ck: CrawlKeys) -> None:
        self.client = client
        self.ck = ck

    def first_origin(self, origin: str) -> bool:
        """True for the one caller, in the whole cluster, that sees ``origin`` first (SET NX):
        it admits the origin's ``Sitemap:`` lines."""
        return bool(self.client.set(self.ck.sitemap_origin(origin), "1", nx=True))

    def is_sitemap(self, url: str) -> bool:
        return bool(self.client.sismember(self.ck.for_url(url).sitemaps, url))

    def mark(self, urls: list[str]) -> None:
        """``urls`` are sitemap files of the crawl (marked before they are admitted)."""
        pipe = self.client.pipeline(transaction=False)
        for url in urls:  # each in its own partition's set
            pipe.sadd(self.ck.for_url(url).sitemaps, url)
        pipe.execute()
