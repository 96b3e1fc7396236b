"""The extraction hook: one "product" per page that has a heading (the sample site has docs and
blog posts; a shop's pages would have a price too). Written as a Scrapy callback is: selectors
(``page.css``/``page.xpath``), items yielded. It runs in whichever worker parses the page (the
fetch workers for pages up to ``CRAWLER_INLINE_PARSE_BYTES``, the parse workers for larger
ones), so every worker imports it as ``shop.extract:product`` (this directory is on their
PYTHONPATH)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler_tasks.worker.hooks import Follow, Page


def product(page: Page) -> Iterator[dict[str, Any] | Follow]:
    name = page.css("h1::text").get()
    if not name:
        return  # no item; the crawler's links are followed as they are
    path = page.final_url.split("/", 3)[-1]
    yield {
        "url": page.final_url,
        "name": name.strip(),
        "description": page.css('meta[name="description"]::attr(content)').get(),
        "section": path.split("/")[0] if "/" in path else "home",
        "words": len(page.xpath("string(//body)").get("").split()),
    }
