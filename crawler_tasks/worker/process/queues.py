"""What the crawler itself asks of the broker, whatever its transport (:class:`BrokerView`):
the queues' names, how many messages wait (the dispatcher's budget, host affinity's busy
processes, lost messages), and deleting a dead fetch process's queue. Nothing else reads or
deletes kombu's lists. (How messages travel, and survive a full Redis: ``broker.py``.)
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

from ...settings import Settings
from .liveness import FETCH_TASKS, fetch_urls

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
