"""Riding out Redis being down or full, inside the process that noticed it.

While Redis restarts, or refuses writes at ``maxmemory`` (``noeviction``), every call fails the
same way. Publishing a Celery retry then fails too (Celery rejects the message for good when
its retry cannot be published), so a task instead waits here, backing off, holding its
unacknowledged message, and goes on when Redis answers again. Every task is idempotent, so
running it again from the top is safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import redis
from kombu.exceptions import OperationalError
from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)

from .logs import Throttled

log = logging.getLogger(__name__)

#: Redis is down or restarting (BusyLoadingError is a ConnectionError), full (maxmemory with
#: noeviction), or a replica after a failover; on a Redis Cluster also a master down or being
#: failed over (CLUSTERDOWN, TRYAGAIN, a slot no node serves yet): worth waiting for, never a
#: URL's fault. Celery's publish wraps the broker's errors in kombu's OperationalError.
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    redis.ConnectionError,
    redis.TimeoutError,
    OutOfMemoryError,
    ReadOnlyError,
    ClusterError,
    TryAgainError,
    SlotNotCoveredError,
)

T = TypeVar("T")


def ride_out(
    call: Callable[[], T],
    patience: float,
    throttled: Throttled,
    stop: threading.Event | None = None,
    max_delay: float = 2.0,
) -> T:
    """``call()``, again and again while Redis is unavailable, for up to ``patience`` seconds
    (then the last error is raised). Waits 0.1 s, doubling up to ``max_delay``."""
    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            result = call()
        except REDIS_UNAVAILABLE as exc:
            if time.monotonic() + delay > deadline or (stop is not None and stop.is_set()):
                raise
            throttled.failed(exc)
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
            delay = min(delay * 2, max_delay)
        else:
            throttled.ok()
            return result
