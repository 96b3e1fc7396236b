"""The crawl-state client's connections (state/sockets.py): blocking sockets bounded by the
kernel (SO_RCVTIMEO / SO_SNDTIMEO), not by CPython's poll before each send and recv; a Redis
that stops answering still fails a call within the timeout, as ``redis.TimeoutError``, and
the client works again once it answers; no reply left unread reaches the next command."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from crawler_tasks.state import connection, sockets
from tests.support.fault_injection import RestartableRedis

TIMEOUT = 0.5


def kernel_timeouts(sock: socket.socket) -> tuple[tuple[int, int], tuple[int, int]]:
    return tuple(  # type: ignore[return-value]
        struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, opt, 16))
        for opt in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO)
    )


@pytest.fixture
def state(redis_url: str) -> Iterator[redis.Redis]:
    client = connection.connect(redis_url, pool_size=8, socket_timeout=2.5)
    yield client
    client.close()


def test_a_state_connection_blocks_in_the_kernel_with_the_timeout_set_there(state):
    state.ping()
    conn = state.connection_pool.get_connection()
    try:
        assert conn._sock.gettimeout() is None  # no poll() before each send and recv
        assert kernel_timeouts(conn._sock) == ((2, 500_000), (2, 500_000))
    finally:
        state.connection_pool.release(conn)


def test_a_pubsub_read_keeps_the_kernel_mode_and_may_wait_beyond_the_timeout(redis_url):
    client = connection.connect(redis_url, pool_size=4, socket_timeout=TIMEOUT)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("sockets-test")
    assert pubsub.get_message(timeout=0.05) is None  # a read with its own timeout
    sock = pubsub.connection._sock
    assert sock.gettimeout() is None
    assert kernel_timeouts(sock)[0] == (0, 500_000)
    # get_message(timeout=None) waits for ever, as redis-py promises, not TIMEOUT.
    later = threading.Timer(3 * TIMEOUT, lambda: client.publish("sockets-test", "late"))
    later.start()
    message = pubsub.get_message(timeout=None)
    later.join()
    assert message is not None and message["data"] == b"late"
    assert kernel_timeouts(sock)[0] == (0, 500_000)
    pubsub.close()
    client.close()


def test_a_reply_left_unread_never_answers_the_next_command(state):
    """A command interrupted between its send and its read (an exception in between) must
    not leave its reply for the next user of the connection (redis-py 8.1's pool does not
    guard against it while maintenance notifications are on, its default)."""
    state.set("sockets-test", b"value")
    pool = state.connection_pool
    conn = pool.get_connection()
    conn.send_command("PING")
    time.sleep(0.05)  # the reply is in the socket's buffer
    pool.release(conn)
    assert state.get("sockets-test") == b"value"
    with state.pipeline() as pipe:
        pipe.get("sockets-test").incr("sockets-count")
        assert pipe.execute() == [b"value", 1]


def test_an_idle_connection_the_server_closed_is_replaced_before_use(redis_url, client):
    """The pool's poll is kept for a connection idle beyond IDLE_POLL: one the server closed
    meanwhile (CLIENT KILL, its idle timeout, a restart) never fails the next command."""
    state = connection.connect(redis_url, pool_size=1, socket_timeout=2.5)
    state.set("sockets-test", b"value")
    client.client_kill_filter(_id=state.client_id())
    time.sleep(sockets.IDLE_POLL + 0.2)
    assert state.get("sockets-test") == b"value"
    state.close()


@pytest.fixture
def own_redis() -> Iterator[RestartableRedis]:
    server = RestartableRedis()
    server.start()
    yield server
    assert server.proc is not None
    server.proc.send_signal(signal.SIGCONT)
    server.stop()


def timed(call: Any) -> tuple[float, BaseException | None]:
    """Seconds ``call()`` took and what it raised, run in a thread so that a hang fails the
    test instead of blocking it."""
    outcome: list[Any] = []

    def run() -> None:
        start = time.monotonic()
        try:
            call()
            outcome.append((time.monotonic() - start, None))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            outcome.append((time.monotonic() - start, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10 * TIMEOUT + 5)
    assert outcome, "the call hung on a frozen Redis"
    return outcome[0]  # type: ignore[no-any-return]


@pytest.mark.timeout(60)
def test_a_frozen_redis_fails_calls_within_the_timeout_and_the_client_recovers(own_redis):
    client = connection.connect(own_redis.url, pool_size=8, socket_timeout=TIMEOUT)
    client.set("k", b"v")
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGSTOP)
    try:
        results: list[tuple[float, BaseException | None]] = []
        threads = [
            threading.Thread(target=lambda: results.append(timed(lambda: client.get("k"))))
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # A send that cannot go out (the peer's buffers full) is bounded too.
        results.append(timed(lambda: client.set("big", b"x" * 64_000_000)))
    finally:
        own_redis.proc.send_signal(signal.SIGCONT)
    for took, error in results:
        assert isinstance(error, redis.TimeoutError), error
        assert TIMEOUT * 0.9 <= took < TIMEOUT * 4
    assert connection.wait_out(lambda: client.get("k"), patience=10) == b"v"
    assert [client.get("k") for _ in range(20)] == [b"v"] * 20
    client.close()
