"""An in-process driver: runs a crawl in the test's own thread against the real Redis, with
the real dispatcher and pipeline, and a local deque where the broker would be (like arq's
burst worker or dramatiq's stub broker). Everything but Celery's transport is what a worker
runs: release.lua decides what goes, fetches go over HTTP to the test's servers, parses,
admission and finish.lua are the same calls. Tests that are about Celery itself (acks,
redelivery, pools, signals, Flower) keep using real worker processes (``workers`` fixture).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from crawler_tasks.settings import Settings
from crawler_tasks.surface.crawl import Crawl
from crawler_tasks.worker.dispatch.dispatcher import Dispatcher
from crawler_tasks.worker.runtime.context import Context
from crawler_tasks.worker.runtime.handoff import Publisher
from crawler_tasks.worker.visit import pipeline


class Driver:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.messages: deque[tuple[str, str, str, int]] = deque()
        self.published: list[tuple[str, str, int, str]] = []  # (crawl, url, depth, queue)
        self.batches: list[int] = []  # URLs per fetch message
        self.callbacks: list[tuple[str, str, dict[str, Any]]] = []
        self.results: list[tuple[str, str, str]] = []  # (task, url, outcome)
        #: on_item messages: (task, crawl, url, depth, items); ``fail_items`` makes sending raise.
        self.items_sent: list[tuple[str, str, str, int, list[dict[str, Any]]]] = []
        self.fail_items: Exception | None = None
        self.ctx = Context(settings, _Publisher(self), self._callback, self._send_items)
        self.dispatcher = Dispatcher(lambda: self.ctx, settings)

    def close(self) -> None:
        self.ctx.close()

    def _callback(self, task: str, crawl_id: str, summary: dict[str, Any]) -> None:
        self.callbacks.append((task, crawl_id, summary))

    def _send_items(
        self, task: str, queue: str, crawl_id: str, url: str, depth: int, items: list
    ) -> None:  # type: ignore[type-arg]
        if self.fail_items is not None:
            raise self.fail_items
        self.items_sent.append((task, crawl_id, url, depth, items))

    def step(self) -> bool:
        """One dispatcher tick, then every message it and its tasks produced; True if
        anything happened."""
        busy = self.dispatcher.tick()
        while self.messages:
            task, crawl_id, url, depth = self.messages.popleft()
            run = {
                "fetch": pipeline.fetch_url,
                "parse": pipeline.parse_url,
                "render": pipeline.render_url,
            }[task]
            self.results.append((task, url, run(self.ctx, crawl_id, url, depth)))
            busy = True
        return busy

    def run(self, crawl: Crawl, timeout: float = 60.0) -> dict[str, Any]:
        """Drive until ``crawl`` is finished; returns its summary."""
        deadline = time.monotonic() + timeout
        while not crawl.finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{crawl} not finished after {timeout}s: {crawl.progress()}")
            if not self.step():
                time.sleep(0.005)  # waiting for a token, a lease or a retry
        return crawl.summary()


class _Publisher(Publisher):
    """The driver's deque where the broker would be."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def fetch(self, crawl_id: str, items: list[tuple[str, int]], queue: str) -> None:
        self.driver.batches.append(len(items))
        for url, depth in items:
            self.driver.published.append((crawl_id, url, depth, queue))
            self.driver.messages.append(("fetch", crawl_id, url, depth))

    def parse(self, crawl_id: str, url: str, depth: int) -> None:
        self.driver.messages.append(("parse", crawl_id, url, depth))

    def render(self, crawl_id: str, url: str, depth: int) -> None:
        self.driver.messages.append(("render", crawl_id, url, depth))
