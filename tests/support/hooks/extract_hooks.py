"""Users' extraction hooks and on_item task for the tests (importable with this directory on
sys.path / PYTHONPATH; a worker registers the task with ``--include extract_hooks``)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from crawler_tasks import app
from crawler_tasks.worker.hooks import Page, Result


def two_items(page: Page) -> list[dict[str, Any]]:
    """Two items per page, from the whole tree (the <head> included) and the decoded text."""
    title = page.tree.findtext(".//head/title")
    return [
        {"title": title, "links": len(page.links), "html": page.text.startswith("<!DOCTYPE")},
        {"depth": page.depth, "status": page.status, "crawl": page.crawl_id},
    ]


def moody(page: Page) -> dict[str, Any]:
    """Raises on /bad, sleeps past any short deadline on /slow, else one item."""
    if page.url.endswith("/bad"):
        raise ValueError("no price on this page")
    if page.url.endswith("/slow"):
        time.sleep(3)
    return {"url": page.url}


def slow(page: Page) -> dict[str, Any]:
    """A page whose extraction takes a second (a heavy parse, a slow hook)."""
    time.sleep(1.0)
    return {"url": page.url}


def steer(page: Page) -> Result:
    """Follows a link no page has, drops every link to /skip/..."""
    drop = [link for link in page.links if "/skip/" in link]
    return Result(items=[{"page": page.url}], follow=["hidden", "/also-hidden"], drop=drop)


def not_json(page: Page) -> list[Any]:
    return [{"when": object()}]


@app.task(name="extract_hooks.store")
def store(crawl_id: str, url: str, items: list[dict[str, Any]]) -> None:
    with open(os.environ["TEST_ITEMS_FILE"], "a") as f:
        f.write(json.dumps({"crawl_id": crawl_id, "url": url, "items": items}) + "\n")


@app.task(name="extract_hooks.explode")
def explode(crawl_id: str, url: str, items: list[dict[str, Any]]) -> None:
    raise RuntimeError(f"cannot store the items of {url}")


def scrapy_style(page: Page):  # type: ignore[no-untyped-def]
    """Written as a Scrapy callback: selectors, a generator, links yielded to follow; and
    lxml.html's own API on the tree."""
    yield {
        "title": page.css("h1::text").get(),
        "tags": page.css(".tag::text").getall(),
        "hrefs": page.xpath("//a/@href").getall(),
        "text": page.tree.body.text_content(),
        "anchors": len(page.tree.cssselect("a")),
        "iterlinks": sorted({link for _, _, link, _ in page.tree.iterlinks()}),
        "joined": page.urljoin("x/y"),
    }
    yield from page.follow_all(css="button::attr(data-href)")
    for a in page.css("a.next"):
        yield page.follow(a)


def moody_everywhere(page: Page) -> dict[str, Any]:
    """Raises on every page but the first (its path is /)."""
    if page.url.rstrip("/").count("/") > 2:
        raise ValueError("no price on this page")
    return {"url": page.url}
