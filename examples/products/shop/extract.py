"""The extraction hook: one "product" per page that has a heading (the sample site has docs and
blog posts; a shop's pages would have a price too). Runs in the parse workers, which import it
as ``shop.extract:product`` (this directory is on their PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from crawler_tasks.worker.hooks import Page, Result


def product(page: Page) -> Result:
    tree = page.tree
    name = tree.findtext(".//h1") if tree is not None else None
    if not name:
        return Result()  # no item; the crawler's links are followed as they are
    description = None
    for meta in tree.iter("meta"):
        if meta.get("name") == "description":
            description = meta.get("content")
    path = page.final_url.split("/", 3)[-1]
    item: dict[str, Any] = {
        "url": page.final_url,
        "name": name.strip(),
        "description": description,
        "section": path.split("/")[0] if "/" in path else "home",
        "words": len(" ".join(tree.itertext()).split()),
    }
    # Steering the crawl from code: never follow links to private areas.
    return Result(items=[item], drop=[u for u in page.links if "/private/" in u])
