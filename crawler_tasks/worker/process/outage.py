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
from collections.abc import Callable
from typing import TypeVar

from kombu.exceptions import OperationalError
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from ...state.connection import UNAVAILABLE, wait_out
from .logs import Throttled

log = logging.getLogger(__name__)

#: Redis is down or restarting (BusyLoadingError is a ConnectionError), full (maxmemory with
#: noeviction), or a replica after a failover; on a Redis Cluster also a master down or being
#: failed over (CLUSTERDOWN, TRYAGAIN, a slot no node serves yet): worth waiting for, never a
#: URL's fault. Celery's publish wraps the broker's errors in kombu's OperationalError.
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    *UNAVAILABLE,
    OutOfMemoryError,
    ReadOnlyError,
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
    result = wait_out(call, patience, REDIS_UNAVAILABLE, throttled.failed, stop, max_delay)
    throttled.ok()
    return result
