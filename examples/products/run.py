"""Crawl the bundled sample site with the ``shop`` hook and store its items in SQLite, all on
this machine: a private redis-server, the crawler's workers (every one imports the hook: pages
are parsed where they are fetched), and a worker of the ``items`` queue running
``shop.tasks.store``.

    make example                         # or: .venv/bin/python examples/products/run.py
    sqlite3 data/products.db 'select * from products'
"""

from __future__ import annotations

import functools
import http.server
import os
import sqlite3
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent


def serve_sample_site() -> str:
    site = resources.files("crawler_tasks").joinpath("sample_site")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT section, name, url FROM products ORDER BY url").fetchall()
        except sqlite3.OperationalError:  # no table yet
            return []


def main() -> None:
    from crawler_tasks import start_crawl
    from crawler_tasks.surface.embedded import (
        local_workers,
        private_redis,
        stop_process,
        worker_command,
    )

    out = Path("data").resolve()
    # The store task opens the database from the first item on, which may come before the
    # crawl has written any file of its own there.
    out.mkdir(parents=True, exist_ok=True)
    db = out / "products.db"
    db.unlink(missing_ok=True)
    ours = {"PYTHONPATH": str(HERE), "SHOP_DB": str(db)}
    env = {**os.environ, **ours}
    url = serve_sample_site()
    with (
        private_redis() as broker,
        local_workers(broker, broker, extra_env=ours, fetchers=1, parsers=1),
    ):
        items_worker = subprocess.Popen(
            [*worker_command("items", "threads", 2, f"items-{os.getpid()}"), "--include",
             "shop.tasks"],
            env={**env, "CRAWLER_BROKER_URL": broker},
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            # --8<-- [start:start]
            crawl = start_crawl(
                [url], broker=broker, output=str(out), allow_private_networks=True,
                rates={"127.0.0.1": 20.0}, extract="shop.extract:product",
                on_item="shop.tasks.store",
            )  # fmt: skip
            summary = crawl.wait(timeout=120)
            # --8<-- [end:start]
            want = summary["counters"].get("items", 0)
            deadline = time.monotonic() + 30
            while len(rows(db)) < want and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop_process(items_worker)
    print(f"crawl {crawl.id}: {summary['counters']['done']} pages, {want} items; in {db}:")
    for section, name, page in rows(db):
        print(f"  {section:8} {name:30} {page}")
    if len(rows(db)) != want:
        sys.exit(f"expected {want} rows in {db}")


if __name__ == "__main__":
    main()
