"""scrapy-playwright comparison crawler for bench/render.py (run as a subprocess, not a
benchmark itself).

    .venv/bin/python bench/_scrapy_playwright.py START_URL OUTPUT.jsonl [CONCURRENCY]

Every page rendered by Playwright in the system Chromium (as ours), each ``goto`` waiting for
``networkidle`` (links inserted by XHR or after a ``setTimeout`` are there then; its default,
``load``, misses them; ours waits for the page to go quiet instead, worker/render/browser.py),
images/fonts/media aborted, same-host links followed, robots.txt
obeyed, CONCURRENCY requests per domain, no delay. One JSON line per page (url, links).
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess

BLOCKED = {"image", "font", "media"}
META = {"playwright": True, "playwright_page_goto_kwargs": {"wait_until": "networkidle"}}


class JsSpider(scrapy.Spider):
    name = "bench-js"

    def __init__(self, url: str, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.first, self.allowed_domains = url, [urlsplit(url).hostname or ""]

    async def start(self):  # type: ignore[no-untyped-def]  # Scrapy >= 2.13
        yield scrapy.Request(self.first, meta=META)

    def start_requests(self):  # type: ignore[no-untyped-def]  # older Scrapy
        yield scrapy.Request(self.first, meta=META)

    def parse(self, response):  # type: ignore[no-untyped-def]
        links = response.css("a::attr(href)").getall()
        yield {"url": response.url, "links": len(links)}
        for href in links:
            yield response.follow(href, meta=META)


def main() -> None:
    start, output = sys.argv[1], sys.argv[2]
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    process = CrawlerProcess(
        settings={
            "DOWNLOAD_HANDLERS": {
                "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
                "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            },
            "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
            "PLAYWRIGHT_BROWSER_TYPE": "chromium",
            "PLAYWRIGHT_LAUNCH_OPTIONS": {
                "executable_path": "/usr/bin/chromium",
                "args": ["--no-sandbox"],
                "headless": True,
            },
            "PLAYWRIGHT_ABORT_REQUEST": lambda req: req.resource_type in BLOCKED,
            "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": concurrency,
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "ROBOTSTXT_OBEY": True,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "RETRY_ENABLED": False,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "FEEDS": {output: {"format": "jsonlines"}},
            "USER_AGENT": "bench-scrapy-playwright",
        }
    )
    process.crawl(JsSpider, url=start)
    process.start()


if __name__ == "__main__":
    main()
