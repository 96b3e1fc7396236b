"""The total deadline of one fetch (:class:`Deadline`), and the one thread that enforces every
deadline of a process (no signals: fetches run in thread pools)."""

from __future__ import annotations

import contextlib
import heapq
import os
import socket
import threading
import time

from ..errors import FetchTimeout


class Deadline:
    """The total deadline of one fetch, enforced by a timer thread (no signals: thread pools).

    At the deadline it shuts down the sockets the transport attached: that wakes the fetching
    thread wherever it blocks (TLS handshake, status line, headers, body); it then sees an
    error or a premature end of data, and :attr:`expired` tells it why. A socket is only cut
    while it belongs to this fetch: it is attached when the fetch's thread connects or sends
    on it, forgotten when the connection goes back to the pool, and the lock makes cutting and
    forgetting exclusive.
    """

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._done = False
        self.expired = False
        #: time.monotonic() when the fetch's first request had been written to its socket
        #: (politeness paces from it, see :meth:`sent`)
        self.sent_at: float | None = None
        _WATCH.add(self._end, self)

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def sent(self) -> None:
        """The first request of the fetch is written. Not when its socket connected: a thread
        of a busy process can wait for the GIL between the two, the server then sees the
        request later than the pace counts from, and the next request, sent on time, can
        reach it less than an interval later."""
        if self.sent_at is None:
            self.sent_at = time.monotonic()

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self.expired:
                shutdown_socket(sock)
            else:
                self._sockets.append(sock)

    def forget(self) -> None:
        with self._lock:
            self._sockets.clear()

    def check(self) -> None:
        if self.expired or self.remaining() <= 0:
            raise FetchTimeout("total deadline exceeded")

    def finish(self) -> None:
        with self._lock:
            self._done = True
            self._sockets.clear()

    @property
    def done(self) -> bool:
        return self._done

    def expire(self) -> None:
        """Called by the watcher at the deadline (nothing happens once finished)."""
        with self._lock:
            if self._done:
                return
            self.expired = True
            for sock in self._sockets:
                shutdown_socket(sock)
            self._sockets.clear()


class _Watcher:
    """One thread per process that expires every :class:`Deadline` at its time (a timer
    thread per fetch cost a thread's start and end for each page). Finished deadlines stay
    in the heap (``expire`` does nothing for them) until their time comes or the heap has
    doubled since it was last swept of them: at 300 pages/s and a 60 s deadline it would
    otherwise hold 18,000 of them."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty, its thread not started: at import, and in a forked child (where the
        parent's thread does not run and its lock may have been held)."""
        self._heap: list[tuple[float, int, Deadline]] = []
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._sweep_at = 1024

    def add(self, end: float, deadline: Deadline) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fetch-deadlines", daemon=True
                )
                self._thread.start()
            if len(self._heap) >= self._sweep_at:
                self._heap = [entry for entry in self._heap if not entry[2].done]
                heapq.heapify(self._heap)
                self._sweep_at = max(1024, 2 * len(self._heap))
            heapq.heappush(self._heap, (end, id(deadline), deadline))
            if self._heap[0][2] is deadline:  # sooner than what the thread sleeps for
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, due = heapq.heappop(self._heap)
            due.expire()


_WATCH = _Watcher()
os.register_at_fork(after_in_child=_WATCH.reset)


def shutdown_socket(sock: socket.socket) -> None:
    # Closed already, or detached by the TLS wrapper (then the wrapper is attached too): ignore.
    with contextlib.suppress(OSError):
        # The plain socket method even on an SSLSocket: it acts on the file descriptor only and
        # leaves the TLS object, which the fetching thread is using, alone.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
