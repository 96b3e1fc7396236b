"""Waiting for a condition with a deadline."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
