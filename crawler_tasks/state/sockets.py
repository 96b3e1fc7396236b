"""Connections to the crawl-state Redis that cost two GIL-releasing system calls a round trip
(send, recv) instead of about five (issue 32).

A fetch process runs hundreds of threads, and each system call that releases the GIL while
others wait for it costs a hand-off (futex wake, futex wait, context switch). redis-py's
stock connection makes three needless ones per command:

- a socket with a Python-level timeout makes CPython poll() before every send and every
  recv (socketmodule.c, ``sock_call_ex``). Here the socket stays in blocking mode and the
  kernel bounds each send and recv instead (SO_SNDTIMEO, SO_RCVTIMEO, set to the socket
  timeout): a peer that stops answering still fails the call within the timeout, as a
  ``redis.TimeoutError`` like before, so retries and outage riding see what they saw.
  redis-py is told the socket has no timeout (``socket_timeout=None``), so the places that
  set a timeout of their own for one read (pub/sub, ``can_read``) restore blocking mode, not
  a Python timeout, after it.
- the pool polls a connection (``can_read()``) each time it hands it out, in case an
  earlier command left a reply unread. redis-py disconnects on any error inside a send or a
  read, but not on every path: an exception raised between a command's send and its read
  (an asynchronous one, e.g. Celery's shutdown signal in the main thread) or a pipeline
  stopped between two of its replies returns the connection to the pool with replies
  unread, and the pool's poll does not even guard against that: redis-py 8.1 acts on its
  "has data" answer only with maintenance notifications off, and they are on ("auto") by
  default; it acts only on the poll finding the socket closed. So the connection counts
  the replies it owes (commands sent minus replies read) and tells the pool, without a
  system call, to reconnect one that owes any; it polls only a connection idle for
  ``IDLE_POLL`` s, so that one the server closed meanwhile (a restart, CLIENT KILL) is
  still replaced before use rather than failing its next command.

TLS connections (``rediss://``) keep redis-py's own: a blocking TLS socket timed out by the
kernel reports "want read", which redis-py reads as "no data yet", not as a timeout.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import redis
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

#: A connection unused for longer than this is polled before the pool hands it out (see
#: above): the server may have closed it meanwhile.
IDLE_POLL = 0.5

#: ``can_read()`` called without arguments: the pool's check before it hands a connection
#: out. Pub/sub passes its timeout by keyword and always polls.
_POOL_CHECK: Any = object()


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    micros = max(int((seconds - whole) * 1_000_000), 0 if whole else 1)
    return struct.pack("ll", whole, micros)


def _kernel_timed_out(exc: BaseException) -> bool:
    """True for redis-py's ConnectionError over a send or recv the kernel timed out: a
    blocking socket reports SO_RCVTIMEO / SO_SNDTIMEO expiring as EAGAIN."""
    return isinstance(exc.__context__, BlockingIOError) and not isinstance(exc, TimeoutError)


class KernelTimeouts:
    """Mixin for redis-py's ``Connection`` classes (see the module's docstring)."""

    _sock: socket.socket | None

    def __init__(
        self,
        *args: Any,
        socket_timeout: float | None = None,
        socket_connect_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        #: Replies owed: commands sent (or packed to be sent) minus replies read.
        self.unanswered = 0
        self._last_reply = 0.0
        self.kernel_timeout = socket_timeout
        if socket_connect_timeout is None:
            socket_connect_timeout = socket_timeout
        super().__init__(  # type: ignore[call-arg]
            *args, socket_timeout=None, socket_connect_timeout=socket_connect_timeout, **kwargs
        )

    def _connect(self) -> socket.socket:
        sock: socket.socket = super()._connect()  # type: ignore[misc]
        self._set_kernel_timeout(sock, self.kernel_timeout)
        return sock

    @staticmethod
    def _set_kernel_timeout(sock: socket.socket, seconds: float | None) -> None:
        wait = _timeval(seconds) if seconds else struct.pack("ll", 0, 0)  # 0: no limit
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, wait)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, wait)

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().disconnect(*args, **kwargs)  # type: ignore[misc]
        finally:
            self.unanswered = 0

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        # Counted before sending: a send that fails disconnects, which clears the count; one
        # interrupted after it leaves the count up, and the pool then replaces the connection.
        self.unanswered += 1
        super().send_command(*args, **kwargs)  # type: ignore[misc]

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        self.unanswered += len(commands)
        return super().pack_commands(commands)  # type: ignore[misc]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            super().send_packed_command(command, check_health)  # type: ignore[misc]
        except ConnectionError as exc:
            if _kernel_timed_out(exc):
                raise TimeoutError("Timeout writing to socket") from exc
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        forever = "timeout" in kwargs and kwargs["timeout"] is None
        if forever and self._sock is not None:  # pub/sub's blocking read: no limit, as before
            self._set_kernel_timeout(self._sock, None)
        try:
            response = super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError:  # an error reply: read in full
            self._answered()
            raise
        except ConnectionError as exc:
            if _kernel_timed_out(exc):
                raise TimeoutError("Timeout reading from socket") from exc
            raise
        finally:
            if forever and self._sock is not None:
                self._set_kernel_timeout(self._sock, self.kernel_timeout)
        self._answered()
        return response

    def _answered(self) -> None:
        if self.unanswered > 0:
            self.unanswered -= 1
        self._last_reply = time.monotonic()

    def can_read(self, timeout: Any = _POOL_CHECK) -> bool:
        if timeout is not _POOL_CHECK:
            return bool(super().can_read(timeout))  # type: ignore[misc]
        if self.unanswered:
            # Raised, not answered True: redis-py 8's pool ignores True while its
            # maintenance notifications are on ("auto", the default), but reconnects on this.
            raise ConnectionError("Connection has unread replies")
        if time.monotonic() - self._last_reply > IDLE_POLL:
            return bool(super().can_read(0))  # type: ignore[misc]
        return False


class TCPConnection(KernelTimeouts, redis.Connection):
    """A ``redis://`` connection (see the module's docstring)."""


class UnixConnection(KernelTimeouts, redis.UnixDomainSocketConnection):
    """A ``unix://`` connection (see the module's docstring)."""


def connection_class(url: str) -> type[redis.Connection] | None:
    """The connection class for ``url``'s scheme; None: redis-py's own (TLS)."""
    if url.startswith("redis://"):
        return TCPConnection
    if url.startswith("unix://"):
        return UnixConnection  # type: ignore[return-value]
    return None
