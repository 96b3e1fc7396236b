"""Logging for errors that repeat in a loop: a Redis outage makes every poll of every worker
fail the same way, and a traceback per poll (20 a second per worker) buries the one line that
says what happened. :class:`Throttled` logs the first failure, then one line per interval with
the count, then one line when it works again."""

from __future__ import annotations

import logging
import threading
import time


class Throttled:
    """One logger for one loop. ``failed()`` on each failure, ``ok()`` on each success."""

    def __init__(self, log: logging.Logger, what: str, every: float = 10.0) -> None:
        self.log = log
        self.what = what
        self.every = every
        self._since = 0.0  # monotonic time of the first failure of the current streak
        self._last = 0.0  # monotonic time of the last line logged
        self._count = 0  # failures since that line
        self._total = 0  # failures in the current streak
        self._lock = threading.Lock()  # tasks of a threads pool share one

    def failed(self, exc: BaseException, expected: bool = True) -> None:
        """Count ``exc``; log it if it opens a streak or ``every`` seconds passed. An
        ``expected`` error (Redis down or full) is one line; others carry their traceback."""
        with self._lock:
            self._failed(exc, expected)

    def _failed(self, exc: BaseException, expected: bool) -> None:
        now = time.monotonic()
        self._count += 1
        self._total += 1
        if self._total == 1:
            self._since = now
        elif now - self._last < self.every:
            return
        repeats = f" ({self._count} times in {now - self._last:.0f}s)" if self._total > 1 else ""
        msg = f"{self.what} failed{repeats}: {type(exc).__name__}: {exc}"
        self.log.error(msg, exc_info=None if expected else exc)
        self._last = now
        self._count = 0

    def ok(self) -> None:
        if self._total:  # unlocked fast path: a success in a healthy loop costs nothing
            with self._lock:
                self._ok()

    def _ok(self) -> None:
        if self._total:
            took = time.monotonic() - self._since
            self.log.warning(
                "%s works again after %d failures in %.1fs", self.what, self._total, took
            )
            self._total = self._count = 0


class OncePerInterval(logging.Filter):
    """A filter for another library's logger that repeats itself in a loop (kombu logs a
    traceback every second while Redis is full): a message passes once per ``every`` seconds,
    with the count of those dropped since, and without its traceback after the first."""

    def __init__(self, every: float = 30.0) -> None:
        super().__init__()
        self.every = every
        self._seen: dict[str, tuple[float, int]] = {}  # message -> (last passed, dropped)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = str(record.msg)
        with self._lock:
            last, dropped = self._seen.get(key, (0.0, -1))
            if dropped >= 0 and now - last < self.every:
                self._seen[key] = (last, dropped + 1)
                return False
            self._seen[key] = (now, 0)
        if dropped > 0:
            record.msg = f"{record.msg} ({dropped} more like it in {now - last:.0f}s)"
            record.exc_info = record.exc_text = None
        return True
