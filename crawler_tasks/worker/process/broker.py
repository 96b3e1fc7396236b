"""kombu's Redis transport, made to survive a Redis at ``maxmemory`` (``noeviction``).

A full Redis refuses every command queued in a MULTI, and kombu records and acknowledges each
message in one: the ack (``ZREM`` + ``HDEL``, which only free memory) fails with
``OutOfMemoryError``, Celery does not count that as a connection error, and the worker exits.
Here the ack and reject run as a plain pipeline, which a full Redis accepts. Recording a
delivered message (``ZADD`` + ``HSET``: new memory) cannot succeed, so while Redis is full a
delivered message is kept in this process only: it runs, and is acknowledged as usual; if the
worker dies before that, the message is gone and the crawl's own reclaim must bring its URL
back. Putting back the messages of dead workers (``restore_visible``, at connect and every
10 s) takes a lock (``SET NX``) a full Redis refuses: it is skipped until the next round
(it logged a traceback every 10 s). And a worker that starts or reconnects while Redis is
full waits for room instead of exiting (see ``Transport``). Selected by ``worker/process/app.py`` for
``redis://`` brokers.

What the crawler asks of the broker (queue names, waiting messages, a dead process's queue)
is in ``worker/process/queues.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis.exceptions import OutOfMemoryError

from .liveness import FETCH_TASKS
from .logs import Throttled
from .queues import DIRECT_PREFIX

log = logging.getLogger(__name__)
_unrecorded = Throttled(log, "recording a delivered message (Redis is full)", every=30.0)
_unrestored = Throttled(log, "restoring unacknowledged messages (Redis is full)", every=60.0)


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's record of delivered messages, kept in this process only for fetch messages.

    kombu writes each delivered message into the broker's unacked hash (a MULTI of ZADD +
    HSET of the whole message) and removes it at the ack (ZREM + HDEL): two round trips a
    message, ~0.8 a page (issue 32), so that a message of a worker that died comes back after
    ``visibility_timeout``. A fetch URL does not need it: the crawl's reclaim takes back a dead
    process's URLs within seconds, and a released URL whose message vanished (the ledger's
    "r" stage with its queues empty and no living process holding it, repair.py) as well.
    So a fetch message is only counted here (prefetch: ``can_consume``), and put back in its
    queue when this process gives it back alive (``reject(requeue=True)``, a channel closed
    with it unacked: a warm shutdown, a lost connection). Other messages (parse, render,
    items) keep kombu's record; so does a message delivered while Redis is full, here too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Delivery tags of messages this process holds with no record in Redis.
        self._in_memory: set[str] = set()

    def append(self, message: Any, delivery_tag: str) -> None:
        if message.headers.get("task") not in FETCH_TASKS:
            try:
                return super().append(message, delivery_tag)  # type: ignore[no-any-return]
            except OutOfMemoryError as exc:
                _unrecorded.failed(exc)
        self._in_memory.add(delivery_tag)
        virtual.QoS.append(self, message, delivery_tag)  # delivered, in memory only

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            return virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-any-return]
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if delivery_tag not in self._in_memory:
            return super().reject(delivery_tag, requeue)  # type: ignore[no-any-return]
        if requeue:
            self._put_back([self.get(delivery_tag)], leftmost=True)
        self.ack(delivery_tag)

    def restore_unacked(self, client: Any = None) -> None:
        delivered: dict[str, Any] = self._delivered  # type: ignore[assignment]
        kept = [m for tag, m in delivered.items() if tag in self._in_memory]
        recorded = [tag for tag in delivered if tag not in self._in_memory]
        self._put_back(kept, client=client)
        with self.channel.conn_or_acquire(client) as conn:
            for tag in recorded:
                self.restore_by_tag(tag, client=conn)
        delivered.clear()
        self._in_memory.clear()

    def _put_back(self, messages: list[Any], leftmost: bool = False, client: Any = None) -> None:
        """``messages`` back in their queues (marked redelivered), as kombu restores one."""
        if not messages:
            return
        with self.channel.conn_or_acquire(client) as conn:
            pipe = conn.pipeline(transaction=False)
            for m in messages:  # the payload as received, as kombu's own record keeps it
                info = m.delivery_info
                self.channel._do_restore_message(
                    m._raw, info["exchange"], info["routing_key"], pipe, leftmost
                )
            pipe.execute()

    def restore_visible(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = super().restore_visible(*args, **kwargs)
        except OutOfMemoryError as exc:  # next round; nothing was restored or lost
            _unrestored.failed(exc)
            return None
        _unrestored.ok()
        return result

    def _remove_from_indices(self, delivery_tag: str, pipe: Any = None) -> Any:
        if pipe is None:
            with self.channel.conn_or_acquire() as client:
                pipe = client.pipeline(transaction=False)
        return pipe.zrem(self.unacked_index_key, delivery_tag).hdel(self.unacked_key, delivery_tag)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    QoS = QoS

    def _create_client(self, asynchronous: bool = False) -> Any:
        # kombu builds a new redis.Redis for every ack and publish (conn_or_acquire); that
        # constructor was ~5 % of a fetch process's CPU. One client per pool is thread-safe
        # (each command takes its own connection); a new pool (reconnect) gets a new client.
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool, cached = self.pool, self.__dict__.get("_sync_client")
        if cached is None or cached.connection_pool is not pool:
            cached = self._sync_client = super()._create_client()
        return cached

    # Declaring a queue (a consumer connecting, the dispatcher's queue depths, a publisher's
    # first message) reads sizes in a MULTI, which a full Redis refuses even for reads, and
    # re-adds the queue's binding (SADD), refused even when the binding is there. Plain reads
    # instead, and a binding that exists needs no write.
    def _size(self, queue: str) -> int:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for pri in self.priority_steps:
                pipe.llen(self._q_for_pri(queue, pri))
            return sum(n for n in pipe.execute() if isinstance(n, int))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for pri in self.priority_steps:
                pipe.exists(self._q_for_pri(queue, pri))
            return any(pipe.execute())

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> Any:
        try:
            return super()._queue_bind(exchange, routing_key, pattern, queue)
        except OutOfMemoryError:
            if queue in self._expires:  # a reply/pidbox queue: its TTL is refreshed next time
                return None
            # A fetch process's own queue is new at every start: it consumes without the
            # binding, and the first publish to it (with room) binds it.
            if queue.startswith(DIRECT_PREFIX):
                return None
            member = self.sep.join([routing_key or "", pattern or "", queue or ""])
            with self.conn_or_acquire() as client:
                if not client.sismember(self.keyprefix_queue % (exchange,), member):
                    raise  # a new binding: only room in Redis will do
            return None


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
    # A consumer that connects (starts, or comes back after a lost connection) writes: its
    # queue bindings (SADD), a MULTI of LLENs. A full Redis refuses them, and Celery takes
    # that as a fatal channel error and exits; as a connection error it tries again with
    # back-off ("Trying to re-establish the connection") until Redis has room.
    connection_errors = (*kombu_redis.Transport.connection_errors, OutOfMemoryError)
