"""Counting one thread's round trips to Redis in the client."""

from __future__ import annotations

import threading


class RoundTrips:
    """Round trips to Redis that this thread makes in the block (each command or pipeline
    sent: redis-py's ``send_packed_command``), counted in the client: ``.count``.

    Not Redis's ``total_reads_processed``: that counter is the server's, and the test's
    Redis is shared by the tests of its process, so a client an earlier test left (a thread,
    a worker) adds to it; a one-round-trip publish once read as two. A round trip the code
    makes on another thread is not counted here, so a test of one thread's round trips
    cannot pass by missing some of them."""

    def __init__(self) -> None:
        self.count = 0
        self._thread = threading.get_ident()

    def __enter__(self) -> RoundTrips:
        from redis.connection import AbstractConnection

        self._class, self._send = AbstractConnection, AbstractConnection.send_packed_command
        send, trips = self._send, self

        def counted(conn, command, check_health=True):  # type: ignore[no-untyped-def]
            if threading.get_ident() == trips._thread:
                trips.count += 1
            return send(conn, command, check_health)

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._class.send_packed_command = self._send  # type: ignore[method-assign]
