"""The Celery tasks. Thin on purpose: small JSON arguments (crawl id, URL, depth), one call
into :mod:`pipeline`, follow-ups enqueued, return. No task waits for another.

``crawl.fetch`` (one URL) and ``crawl.fetch_many`` (URLs released together) go to
``crawl.high|medium|low`` (chosen by the dispatcher from the URLs' depth and the crawl's
priority) and ``crawl.parse`` to ``parse``, so fetching (I/O bound: a threads or gevent pool)
and parsing (CPU bound: prefork) can run in different pools.
Crawl-level retries go back through the frontier (see :mod:`pipeline`); Celery's own
``autoretry_for`` only covers a Redis hiccup, with back-off and jitter.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis
from kombu.exceptions import BatchPublishError, OperationalError
from redis.exceptions import ClusterError, TryAgainError

from ..state import store
from ..state.schedules import Schedules

# The process's life around the tasks (signal handlers, the dispatcher's bootstep): imported
# here so that they are connected wherever a task can run.
from .lifecycle import DEFAULT_SCHEDULES as DEFAULT_SCHEDULES
from .lifecycle import DispatcherStep as DispatcherStep
from .lifecycle import context, settings, shutting_down
from .lifecycle import schedules_file as schedules_file
from .process.app import RENDER_QUEUE, app
from .process.logs import OncePerInterval, Throttled
from .process.outage import REDIS_UNAVAILABLE, ride_out
from .runtime.context import Context, ProcessContext
from .runtime.handoff import Publisher
from .visit import pipeline

log = logging.getLogger(__name__)
_INFRA_ERRORS = (redis.ConnectionError, redis.TimeoutError, ClusterError, TryAgainError)
T = TypeVar("T")


#: One line per interval, not one per task (or one per second), while Redis is down or full.
logging.getLogger("kombu.transport.redis").addFilter(OncePerInterval())
_waiting = Throttled(log, "Redis, in a task (waiting for it)")
_publishing = Throttled(log, "Redis, publishing a fetch (waiting for it)")


def patiently(call: Callable[[], T]) -> T:
    """Run ``call`` through a Redis outage or a full Redis (see :mod:`outage`)."""
    return ride_out(call, settings().redis_outage_wait, _waiting, stop=shutting_down)


class CeleryPublisher(Publisher):
    """The tasks of released, fetched and taken-back URLs, to the broker's queues."""

    def __init__(self) -> None:
        self._held = threading.local()  # the fetch messages of a together() block, per thread

    def fetch(self, crawl_id: str, items: list[tuple[str, int]], queue: str) -> None:
        held = getattr(self._held, "messages", None)
        if held is None:
            publish_fetches([(crawl_id, items, queue)])
        else:
            held.append((crawl_id, items, queue))

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        if getattr(self._held, "messages", None) is not None:
            yield  # inside an outer block: sent with its messages
            return
        held: list[FetchMessage] = []
        self._held.messages = held
        try:
            yield
        finally:  # their URLs are released: sent even if the block failed
            del self._held.messages
            if held:
                publish_fetches(held)

    def parse(self, crawl_id: str, url: str, depth: int) -> None:
        parse.apply_async((crawl_id, url, depth), queue="parse")

    def render(self, crawl_id: str, url: str, depth: int) -> None:
        render.apply_async((crawl_id, url, depth), queue=RENDER_QUEUE)


def enqueue_callback(task_name: str, crawl_id: str, summary: dict[str, Any]) -> None:
    app.send_task(task_name, args=(crawl_id, summary))


def send_items(
    task_name: str, queue: str, crawl_id: str, url: str, depth: int, items: list[dict[str, Any]]
) -> None:
    """A page's items to the user's ``on_item`` task: ``task(crawl_id, url, items)``. If that
    task raises (in the user's worker), ``crawl.item_failed`` dead-letters the page."""
    failed = app.signature("crawl.item_failed", args=(crawl_id, url, depth), queue="parse")
    app.send_task(task_name, args=(crawl_id, url, items), queue=queue, link_error=failed)


FetchMessage = tuple[str, list[tuple[str, int]], str]  # crawl id, (url, depth) items, queue


def publish_fetches(messages: list[FetchMessage]) -> None:
    """One message per entry: ``crawl.fetch`` for one ``(url, depth)``, ``crawl.fetch_many``
    for several; all in one round trip (kombu's publish batch, where the transport has it)."""

    def send() -> None:
        try:
            with app.producer_or_acquire() as producer, producer.batch():
                for crawl_id, items, queue in messages:
                    if len(items) == 1:
                        (url, depth), task = items[0], fetch
                        args: tuple[Any, ...] = (crawl_id, url, depth)
                    else:
                        args, task = (crawl_id, items), fetch_many  # [[url, depth], ...]
                    task.apply_async(args, queue=queue, producer=producer)
        except BatchPublishError as exc:  # Redis away mid-batch: all again (a duplicate
            if isinstance(exc.__cause__, REDIS_UNAVAILABLE):  # message is harmless)
                raise OperationalError(str(exc)) from exc
            raise

    # The dispatcher has released these URLs: a publish that failed would leave them to the
    # reaper (minutes), so wait for Redis here; the dispatcher thread is held (the back-off).
    ride_out(send, settings().redis_outage_wait, _publishing)


app.conf.crawler_runtime = ProcessContext(
    lambda: Context(settings(), CeleryPublisher(), enqueue_callback, send_items)
)


_retry = {
    "bind": True,
    "autoretry_for": _INFRA_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 5,
}


@app.task(name="crawl.fetch", rate_limit=settings().fetch_rate_limit or None, **_retry)
def fetch(self: Any, crawl_id: str, url: str, depth: int) -> str:
    return patiently(lambda: pipeline.fetch_url(context(), crawl_id, url, depth))


@app.task(name="crawl.fetch_many", **_retry)
def fetch_many(self: Any, crawl_id: str, items: list[list[Any]]) -> list[str]:
    """Several released URLs (``[[url, depth], ...]``, see ``Settings.fetch_batch``),
    fetched side by side: each URL's host was released for now, so none waits for another."""
    ctx = context()
    begun = patiently(lambda: pipeline.begin(ctx, crawl_id, [u for u, _ in items]))
    calls = [
        functools.partial(
            patiently, functools.partial(pipeline.fetch_url, ctx, crawl_id, u, d, begun)
        )
        for u, d in items
    ]
    return ctx.side_by_side(calls)


@app.task(name="crawl.parse", **_retry)
def parse(self: Any, crawl_id: str, url: str, depth: int) -> str:
    return patiently(lambda: pipeline.parse_url(context(), crawl_id, url, depth))


@app.task(name="crawl.render", **_retry)
def render(self: Any, crawl_id: str, url: str, depth: int) -> str:
    """A fetched page rendered by this process's browser (worker/visit/render_step.py)."""
    return patiently(lambda: pipeline.render_url(context(), crawl_id, url, depth))


@app.task(name="crawl.item_failed")
def item_failed(*args: Any) -> None:
    """Errback of an on_item task that raised: the page's dead letter says so (its record is
    on disk already). Celery calls it in two shapes: in the worker that ran the task, when
    that worker has this task, with (request, exc, traceback, *ours); else as a message,
    with (task id, *ours)."""
    if len(args) == 6:
        _request, exc, _tb, crawl_id, url, depth = args
        error = f"on_item: {type(exc).__name__}: {exc}"[:500]
    else:
        task_id, crawl_id, url, depth = args
        error = f"on_item task {task_id} failed (its worker's log has the exception)"
    patiently(lambda: pipeline.item_task_failed(context(), crawl_id, url, depth, error))


@app.task(
    name="crawl.start_scheduled", bind=True, **{k: v for k, v in _retry.items() if k != "bind"}
)
def start_scheduled(self: Any, name: str) -> str | None:
    """Started by beat: a new crawl (new id, new dedupe filter) of schedule ``name``."""
    ctx = context()
    item = Schedules(app, ctx.client, ctx.keys).get(name)
    if item is None:
        return None  # removed since beat read it
    opts = store.plan(ctx.settings, item.seeds, schedule=name, **item.options)
    return store.start(ctx.r, opts).id
