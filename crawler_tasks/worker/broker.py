"""kombu's Redis transport, made to survive a Redis at ``maxmemory`` (``noeviction``).

A full Redis refuses every command queued in a MULTI, and kombu records and acknowledges each
message in one: the ack (``ZREM`` + ``HDEL``, which only free memory) fails with
``OutOfMemoryError``, Celery does not count that as a connection error, and the worker exits.
Here the ack and reject run as a plain pipeline, which a full Redis accepts. Recording a
delivered message (``ZADD`` + ``HSET``: new memory) cannot succeed, so while Redis is full a
delivered message is kept in this process only: it runs, and is acknowledged as usual; if the
worker dies before that, the message is gone and the crawl's own reclaim must bring its URL
back. Selected by ``worker/app.py`` for ``redis://`` brokers.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis.exceptions import OutOfMemoryError

from .logs import Throttled

log = logging.getLogger(__name__)
_unrecorded = Throttled(log, "recording a delivered message (Redis is full)", every=30.0)


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            super().append(message, delivery_tag)
        except OutOfMemoryError as exc:
            _unrecorded.failed(exc)
            virtual.QoS.append(self, message, delivery_tag)  # delivered, in memory only

    def _remove_from_indices(self, delivery_tag: str, pipe: Any = None) -> Any:
        if pipe is None:
            with self.channel.conn_or_acquire() as client:
                pipe = client.pipeline(transaction=False)
        return pipe.zrem(self.unacked_index_key, delivery_tag).hdel(self.unacked_key, delivery_tag)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    QoS = QoS


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
