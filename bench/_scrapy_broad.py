"""Scrapy comparison crawler for bench/broad.py (run as a subprocess, not a benchmark itself).

    .venv/bin/python bench/_scrapy_broad.py SEEDS.txt OUTPUT.jsonl PER_HOST DELAY [CONCURRENCY]

Scrapy's documented broad-crawl settings (docs "Broad Crawls"): a large global
``CONCURRENT_REQUESTS`` (256), ``DownloaderAwarePriorityQueue``, cookies, retries and
redirects off, ``REACTOR_THREADPOOL_MAXSIZE=20``, ``LOG_LEVEL=INFO`` -> WARNING here; at the
politeness of the crawl it is compared with: ``CONCURRENT_REQUESTS_PER_DOMAIN=PER_HOST``,
``DOWNLOAD_DELAY=DELAY`` (not randomised, so the rate is exactly 1/DELAY), robots.txt obeyed.
Every link of a seed's hosts is followed (the seeds' hosts are the allowed domains); one JSON
line per page (url, status).
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess


class BroadSpider(scrapy.Spider):
    name = "broad"

    def __init__(self, seeds: list[str], *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.start_urls = seeds
        self.allowed_domains = sorted({urlsplit(s).hostname or "" for s in seeds})

    def parse(self, response):  # type: ignore[no-untyped-def,override]
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main() -> None:
    seeds_file, output, per_host, delay = sys.argv[1:5]
    concurrency = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    seeds = [s.strip() for s in open(seeds_file) if s.strip()]  # noqa: SIM115
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": int(per_host),
            "DOWNLOAD_DELAY": float(delay),
            "RANDOMIZE_DOWNLOAD_DELAY": False,
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
            "REACTOR_THREADPOOL_MAXSIZE": 20,
            "ROBOTSTXT_OBEY": True,
            "AUTOTHROTTLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "RETRY_ENABLED": False,
            "REDIRECT_ENABLED": False,
            "DOWNLOAD_TIMEOUT": 15,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "FEEDS": {output: {"format": "jsonlines"}},
            "USER_AGENT": "bench-scrapy",
        }
    )
    process.crawl(BroadSpider, seeds=seeds)
    process.start()


if __name__ == "__main__":
    main()
