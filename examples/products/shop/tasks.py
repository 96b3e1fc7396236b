"""The on_item task: writes each page's items to SQLite (``SHOP_DB``). Run by a worker of its
own queue: ``celery -A crawler_tasks worker -Q items --include shop.tasks``. Delivery is at
least once, so the write is an upsert keyed by URL."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from crawler_tasks import app

SCHEMA = """CREATE TABLE IF NOT EXISTS products (
    url TEXT PRIMARY KEY, crawl_id TEXT, name TEXT, description TEXT, section TEXT, words INT)"""


@app.task(name="shop.tasks.store")
def store(crawl_id: str, page_url: str, items: list[dict[str, Any]]) -> int:
    with sqlite3.connect(os.environ["SHOP_DB"], timeout=30) as db:
        db.execute(SCHEMA)
        db.executemany(
            "INSERT OR REPLACE INTO products VALUES (?, ?, ?, ?, ?, ?)",
            [
                (i["url"], crawl_id, i["name"], i["description"], i["section"], i["words"])
                for i in items
            ],
        )
    return len(items)
