"""Waiting for a condition with a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def wait_sampling(crawl, sample: Callable[[], None], every: float, timeout: float) -> dict:  # type: ignore[no-untyped-def]
    """``crawl.wait(timeout)``'s summary, ``sample()`` called every ``every`` s meanwhile, on a
    thread of its own (what a test watches while the crawl runs: queues, backlogs, keys)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            sample()

    sampler = threading.Thread(target=run, daemon=True)
    sampler.start()
    try:
        summary: dict = crawl.wait(timeout=timeout)
        return summary
    finally:
        stop.set()
        sampler.join()
