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

Also what the crawler itself asks of the broker, whatever its transport (:class:`BrokerView`):
the queues' names, how many messages wait (the dispatcher's budget, host affinity's busy
processes, lost messages), and deleting a dead fetch process's queue. Nothing else reads or
deletes kombu's lists.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import redis
from kombu.exceptions import ChannelError
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis.exceptions import OutOfMemoryError

from ...settings import Settings
from .liveness import FETCH_TASKS, fetch_urls
from .logs import Throttled

QUEUES = ("crawl.high", "crawl.medium", "crawl.low", "parse")
#: Pages to render (worker/visit/render_step.py): served only by workers started with
#: ``-Q crawl.render`` (each holds a browser), never by fetch or parse workers.
RENDER_QUEUE = "crawl.render"
#: The broker's fetch queues (QUEUES without parse).
FETCH_QUEUES = QUEUES[:3]
#: The queues of single fetch processes (direct_queue): host affinity.
DIRECT_PREFIX = "crawl.direct."


def direct_queue(worker: str) -> str:
    """The queue of one fetch process (``Context.worker_id``): its hosts' URLs (host affinity,
    worker/dispatch/routing.py). Created on first use, like any queue Celery is told to publish to."""
    return f"{DIRECT_PREFIX}{worker}"


#: How kombu's Redis transport names a queue's bindings (one set per exchange) and its
#: priority lists; a direct queue is bound to the default exchange (the default queue's name).
_BINDINGS, _SEP = kombu_redis.Channel.keyprefix_queue, kombu_redis.Channel.sep
#: kombu >= 5.5 mirrors each binding that does not expire in a second set per exchange (its
#: sweep of expired binding tables keeps a table while that set has members).
_PERMANENT = getattr(kombu_redis.Channel, "keyprefix_binding_permanent", None)
_PRIORITIES = kombu_redis.Channel.priority_steps
_EXCHANGES = (*QUEUES, RENDER_QUEUE, "celery")


def _lists(queue: str) -> list[str]:
    """The Redis lists of ``queue``, one per priority step, as kombu names them."""
    return [_SEP.join([queue, str(p)]) if p else queue for p in _PRIORITIES]


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


class Survey(NamedTuple):
    """One look at the broker's fetch queues, by the dispatcher before a release round."""

    #: Messages waiting in the shared fetch queues and the fetch processes' own queues
    #: (None: not a Redis broker this process can read).
    waiting: int | None
    #: Messages waiting in each fetch process's own queue.
    direct: dict[str, int]
    #: The running crawls and the fetch processes joined for affinity, when the broker is the
    #: state's Redis (read in the same round trip); None otherwise.
    running: list[str] | None
    fetchers: set[str] | None
    #: The replies of the ``reads`` asked with it (HMGETs of the state), when shared.
    reads: list[Any] | None = None


class BrokerView:
    """What the crawler asks of the broker. ``connect``: a Celery app's
    ``connection_for_read`` (any transport), for :meth:`idle_stages`; without one, every
    stage counts as idle (the in-process test driver, which has no broker)."""

    def __init__(self, settings: Settings, connect: Callable[[], Any] | None = None) -> None:
        self.settings = settings
        self._connect = connect
        #: A worker's view (not the test driver's): its queues hold every waiting message.
        self.sees_queues = connect is not None
        self._client: redis.Redis | None = None
        self._lists: redis.Redis | None = None  # the broker's lists, for idle_stages

    def client(self, state: redis.Redis) -> redis.Redis | None:
        """The broker's Redis (``state`` when the broker is the state's Redis); None for
        another broker."""
        url = self.settings.broker_url
        if url == self.settings.state_url:
            return state
        if self._client is None and url.split("://", 1)[0] in ("redis", "rediss"):
            self._client = redis.Redis.from_url(url)
        return self._client

    def survey(
        self,
        state: redis.Redis,
        holders: list[str],
        running: str,
        fetchers: str,
        reads: Sequence[tuple[str, tuple[str, ...]]] = (),
    ) -> Survey:
        """LLEN of every fetch queue; with a shared Redis, the SMEMBERS of ``running`` and
        ``fetchers`` (the state's keys) and the HMGETs ``reads`` (key, fields) in the same
        round trip."""
        broker = self.client(state)
        if broker is None:
            return Survey(None, {}, None, None)
        pipe = broker.pipeline(transaction=False)
        for queue in (*FETCH_QUEUES, *map(direct_queue, holders)):
            pipe.llen(queue)
        shared = broker is state
        if shared:
            pipe.smembers(running)
            pipe.smembers(fetchers)
            for key, fields in reads:
                pipe.hmget(key, *fields)
        got = pipe.execute()
        n = len(FETCH_QUEUES) + len(holders)
        lengths = got[:n]
        direct = dict(zip(holders, lengths[len(FETCH_QUEUES) :], strict=True))
        if not shared:
            return Survey(sum(lengths), direct, None, None)
        names = [m.decode() for m in got[n]], {m.decode() for m in got[n + 1]}
        return Survey(sum(lengths), direct, *names, got[n + 2 :])

    def delete_direct(self, state: redis.Redis, worker: str) -> None:
        """A dead fetch process's own queue: its URLs are taken back (reclaim), its messages
        would only fetch them twice. With its bindings (kombu keeps a queue's binding in its
        exchange's set for ever: the default exchange's, where publishers declared it, and
        its own, where the worker did): nothing of it is left."""
        broker = self.client(state)
        if broker is None:
            return
        queue = direct_queue(worker)
        sets = [_BINDINGS % exchange for exchange in _EXCHANGES]
        sets += [_PERMANENT % exchange for exchange in _EXCHANGES] if _PERMANENT else []
        pipe = broker.pipeline(transaction=False)
        for key in sets:
            pipe.smembers(key)
        found = pipe.execute()
        pipe.delete(*_lists(queue))
        pipe.delete(_BINDINGS % queue)  # its own exchange's (the worker declared the queue so)
        if _PERMANENT:
            pipe.delete(_PERMANENT % queue)
        for key, members in zip(sets, found, strict=True):
            mine = [m for m in members if m.decode(errors="replace").endswith(_SEP + queue)]
            if mine:
                pipe.srem(key, *mine)
        pipe.execute()

    def take_direct(self, state: redis.Redis, worker: str) -> list[str]:
        """Empty ``worker``'s own queue in one transaction and return the fetch URLs of its
        messages ("crawl<TAB>url"): a leaving fetch process hands them back itself
        (worker/dispatch/departure.py). Nothing for a broker this process cannot read as lists."""
        broker = self.client(state)
        if broker is None:
            return []
        lists = _lists(direct_queue(worker))
        pipe = broker.pipeline(transaction=True)
        for name in lists:
            pipe.lrange(name, 0, -1)
        pipe.delete(*lists)
        found = pipe.execute()[:-1]
        return [u for messages in found for raw in messages for u in _fetch_urls(raw)]

    def idle_stages(self, fetchers: list[str]) -> set[str]:
        """Which stages' broker queues are empty: "r" (every fetch queue, the fetch
        processes' own included), "q" (parse), "v" (render). A URL waiting unstarted while
        its queue is empty has lost its message (repair.py): a frozen worker's pending BRPOP
        can take a message where no visibility timeout sees it. Any doubt (broker away)
        counts as not empty."""
        if self._connect is None:
            return {"r", "q", "v"}
        stages = {
            "r": (*FETCH_QUEUES, *map(direct_queue, fetchers)),
            "q": ("parse",),
            "v": (RENDER_QUEUE,),
        }
        try:
            if self.settings.broker_url.split("://", 1)[0] in ("redis", "rediss"):
                return self._idle_lists(stages)
            with self._connect() as conn:
                return {s for s, queues in stages.items() if all(_empty(conn, q) for q in queues)}
        except Exception as exc:  # noqa: BLE001 - a doubt is "not idle"
            log.debug("queue depths unknown: %s", exc)
            return set()

    def _idle_lists(self, stages: dict[str, tuple[str, ...]]) -> set[str]:
        """``idle_stages`` on a Redis broker: the LLEN of every queue's lists (one per
        priority step, named as kombu names them) in one round trip. A passive declare per
        queue took a channel and two round trips each (kombu's ``_has_queue``, then
        ``_size``), every two seconds in every process (issue 32)."""
        if self._lists is None:
            self._lists = redis.Redis.from_url(self.settings.broker_url)
        pipe = self._lists.pipeline(transaction=False)
        for queues in stages.values():
            for queue in queues:
                for name in _lists(queue):
                    pipe.llen(name)
        lengths, at, idle = pipe.execute(), 0, set()
        for stage, queues in stages.items():
            n = len(queues) * len(_PRIORITIES)
            if not any(lengths[at : at + n]):
                idle.add(stage)
            at += n
        return idle


def _empty(conn: Any, queue: str) -> bool:
    return queue_length(conn, queue) == 0


def queue_length(conn: Any, queue: str) -> int:
    """Messages waiting in the broker's ``queue`` (0 for one that does not exist)."""
    # A channel per question: after a passive declare fails, an AMQP channel is closed.
    with conn.channel() as channel:
        try:
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
        except ChannelError:  # Redis: an empty list does not exist; AMQP: not declared yet
            return 0


def _fetch_urls(raw: bytes) -> list[str]:
    """ "crawl<TAB>url" of a fetch message as kombu's Redis transport stores it (JSON, its
    body base64 JSON: task protocol 2's [args, kwargs, embed]); none for another message or
    one that cannot be read."""
    try:
        message = json.loads(raw)
        if message.get("headers", {}).get("task") not in FETCH_TASKS:
            return []
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        return fetch_urls(json.loads(body)[0])
    except (ValueError, KeyError, TypeError, IndexError):
        return []
