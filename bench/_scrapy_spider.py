"""Scrapy comparison crawler for bench/crawl.py (run as a subprocess, not a benchmark itself).

    .venv/bin/python bench/_scrapy_spider.py START_URL OUTPUT.jsonl [CONCURRENCY]

A plain CrawlSpider: every same-host link followed (LinkExtractor, Scrapy's default
ignored extensions), robots.txt obeyed, no delays, no AutoThrottle, one JSON line per page
(url, status, title) written through FEEDS. ``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` are both CONCURRENCY (default 16): the site is one host,
and Scrapy's per-domain default of 8 would otherwise halve its concurrency.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from scrapy.crawler import CrawlerProcess
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class SiteSpider(CrawlSpider):
    name = "bench"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, start: str, *args: object, **kwargs: object) -> None:
        host = urlsplit(start).hostname or ""
        self.start_urls = [start]
        self.allowed_domains = [host]
        super().__init__(*args, **kwargs)

    def parse_start_url(self, response):  # type: ignore[no-untyped-def]
        return self.parse_page(response)

    def parse_page(self, response):  # type: ignore[no-untyped-def]
        is_html = isinstance(response, HtmlResponse)
        yield {
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get() if is_html else None,
        }


def main() -> None:
    start, output = sys.argv[1], sys.argv[2]
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "ROBOTSTXT_OBEY": True,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "RETRY_ENABLED": False,
            "FEEDS": {output: {"format": "jsonlines"}},
            "USER_AGENT": "bench-scrapy",
        }
    )
    process.crawl(SiteSpider, start=start)
    process.start()


if __name__ == "__main__":
    main()
