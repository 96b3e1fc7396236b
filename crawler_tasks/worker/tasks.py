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
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import redis
from celery import bootsteps
from celery.signals import (
    beat_init,
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
    worker_shutting_down,
)
from kombu.exceptions import BatchPublishError, OperationalError
from redis.exceptions import ClusterError, TryAgainError

from ..settings import Settings
from ..state import store
from ..state.schedules import Schedules
from .dispatch.departure import Departure
from .dispatch.dispatcher import Dispatcher
from .dispatch.routing import own_queue
from .output.files import process_tag
from .process import (
    broker,
    malloc,  # noqa: F401 (its worker_init handler caps the malloc arenas)
)
from .process.app import RENDER_QUEUE, app
from .process.broker import BrokerView
from .process.logs import OncePerInterval, Throttled
from .process.outage import REDIS_UNAVAILABLE, ride_out
from .runtime.context import Context, ProcessContext
from .runtime.handoff import Publisher
from .visit import pipeline

log = logging.getLogger(__name__)
_INFRA_ERRORS = (redis.ConnectionError, redis.TimeoutError, ClusterError, TryAgainError)
T = TypeVar("T")


def settings() -> Settings:
    value: Settings = app.conf.crawler_settings
    return value


def context() -> Context:
    """This process's context (see :class:`ProcessContext`)."""
    runtime: ProcessContext = app.conf.crawler_runtime
    return runtime.context()


#: One line per interval, not one per task (or one per second), while Redis is down or full.
logging.getLogger("kombu.transport.redis").addFilter(OncePerInterval())
_waiting = Throttled(log, "Redis, in a task (waiting for it)")
_publishing = Throttled(log, "Redis, publishing a fetch (waiting for it)")


#: Set when this worker begins its warm shutdown. A task riding out a Redis outage then gives
#: up at once instead of holding the shutdown for ``redis_outage_wait``: its message is
#: redelivered (acks_late) or its URL taken back by the crawl's reclaim once this worker's
#: heartbeat stops. Without it a worker whose Redis is gone for good (an embedded crawl's
#: command killed) never exits.
_shutting_down = threading.Event()


@worker_shutting_down.connect
def _stop_riding_out(**_: Any) -> None:
    _shutting_down.set()


def patiently(call: Callable[[], T]) -> T:
    """Run ``call`` through a Redis outage or a full Redis (see :mod:`outage`)."""
    return ride_out(call, settings().redis_outage_wait, _waiting, stop=_shutting_down)


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


@worker_init.connect
@beat_init.connect
def _refuse_bad_settings(**_: Any) -> None:
    """A worker or beat started with a bad ``CRAWLER_*`` value stops with one line."""
    error = app.conf.get("crawler_settings_error")
    if error:
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(2)  # not an Exception: Celery's signal dispatch lets it through


@worker_init.connect
def _refuse_without_browser(sender: Any = None, **_: Any) -> None:
    """A worker that takes render tasks (all queues, or crawl.render) and cannot run its
    browser stops with one line (worker/render/browser.py)."""
    from .render.browser import browser_problem

    consumed = getattr(getattr(sender, "app", app).amqp.queues, "consume_from", None)
    if consumed and RENDER_QUEUE not in consumed:
        return
    error = browser_problem(settings())
    if error:
        sys.stderr.write(f"error: render worker: {error}\n")
        raise SystemExit(2)


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


@beat_init.connect
def _load_schedules(sender: Any = None, **_: Any) -> None:
    path = schedules_file(settings())
    if path is None:
        log.info("no schedules file: none in ./config/ or the checkout (CRAWLER_SCHEDULES_FILE)")
        return
    ctx = context()
    n = Schedules(app, ctx.client, ctx.keys).sync_file(path)
    log.info("loaded %d schedules from %s", n, path)


#: Where a schedules file is looked for when CRAWLER_SCHEDULES_FILE is empty.
DEFAULT_SCHEDULES = Path("config") / "schedules.toml"


def schedules_file(s: Settings, cwd: Path | None = None) -> Path | None:
    """The explicit setting; else ``config/schedules.toml`` in the working directory (where
    the Procfile runs beat: a copy of the checkout's files works as the checkout does); else
    the checkout's own, beside the package. An installed wheel has neither: nothing loaded."""
    if s.schedules_file:
        return Path(s.schedules_file)
    checkout = Path(__file__).resolve().parents[2]  # crawler_tasks/worker/tasks.py -> root
    for base in (cwd or Path.cwd(), checkout):
        candidate = base / DEFAULT_SCHEDULES
        if candidate.is_file():
            return candidate.resolve()
    return None


@worker_process_init.connect
def beat_from_the_start(**_: Any) -> None:
    """A process's context, and with it its first heartbeat, before its first task: built
    when a pool process starts (here) and in the main process before it consumes (the
    dispatcher's bootstep), not by the first task. Otherwise the reclaim can meet the URL
    of that first task begun by a process it has never seen beat, and take it back as lost.
    Redis away now: the first task builds it, as before (it waits for Redis anyway)."""
    try:
        context()
    except Exception as exc:  # a start that cannot beat yet is not the process's end
        log.warning("no heartbeat at start (the first task will try again): %s", exc)


@worker_process_shutdown.connect
def _close_context(**_: Any) -> None:
    runtime: ProcessContext = app.conf.crawler_runtime
    runtime.close()


@celeryd_after_setup.connect
def _after_setup(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Every worker notes its pool's size (liveness.pool_has_room); a fetch process also
    takes its own direct queue, first (host affinity: routing.py says which processes do)."""
    instance.app.conf.crawler_pool_slots = getattr(instance, "concurrency", None)
    queues = instance.app.amqp.queues
    taken = list(queues.consume_from)
    pool = getattr(instance.pool_cls, "__module__", str(instance.pool_cls))
    mine = own_queue(taken, pool, process_tag())
    if mine is None:
        return
    queues.add(mine)
    queues.select([mine, *taken])  # before the shared queues (queue_order_strategy)
    instance.app.conf.crawler_direct_queue = mine


# The broker's queue lengths, asked by the dashboard (surface/figures.py) through this module.
queue_length = broker.queue_length


class DispatcherStep(bootsteps.StartStopStep):
    """Runs the frontier dispatcher in every worker's main process; a fetch process's leaves
    the holders of hosts when the worker stops (departure.py)."""

    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.dispatcher: Dispatcher | None = None
        self.departure: Departure | None = None

    def start(self, worker: Any) -> None:
        # A fetch process holds hosts from its dispatcher's first round on (which then counts
        # it), until it leaves (a warm shutdown: close, then _leave) or its heartbeat stops
        # (then a dispatcher deletes its queue and takes its URLs back: routing.HostRouter.
        # refresh, repair.Repair.reclaim). Not here: a full Redis refuses the join, and an
        # exception in a bootstep is the worker's end.
        beat_from_the_start()  # before the consumer takes tasks (threads, gevent, solo pools)
        view = BrokerView(settings(), app.connection_for_read)
        joins = bool(app.conf.get("crawler_direct_queue"))
        self.dispatcher = Dispatcher(context, settings(), broker=view, joins=joins)
        self.departure = Departure(view, process_tag()) if joins else None
        self.dispatcher.start()

    def close(self, worker: Any) -> None:
        """The worker's stop begins (before its pool drains): no new hosts for this process
        (if it joined the holders: a stop before its dispatcher's first round has none)."""
        if self.departure is not None and self.dispatcher and self.dispatcher.router.joined:
            self._leaving("leaving the fetch processes", self.departure.begin)

    def stop(self, worker: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()

    def leave(self) -> None:
        """The pool has drained (worker_shutdown): this process's queue back, and it leaves."""
        if self.departure is not None:
            self._leaving("handing back this process's queue", self.departure.end)
            self.departure = None

    @staticmethod
    def _leaving(what: str, call: Callable[[Context], Any]) -> None:
        # Redis away: this process is taken for dead once it has exited, as a killed one is.
        try:
            call(context())
        except Exception as exc:  # a stop must go on
            log.warning("%s failed (it will be taken for dead instead): %r", what, exc)

    # A cold shutdown calls terminate, not stop (bootsteps). In a worker process it ends the
    # process anyway; an embedded worker (celery.contrib.testing, tests' ``celery_worker``)
    # leaves a dispatcher thread running in the process after its worker has gone.
    terminate = stop


@worker_shutdown.connect
def _leave(sender: Any = None, **_: Any) -> None:
    """After a warm shutdown's pool has drained (Celery sends it after every bootstep has
    stopped): see :meth:`DispatcherStep.leave`."""
    for step in getattr(sender, "steps", None) or ():
        if isinstance(step, DispatcherStep):
            step.leave()


app.steps["worker"].add(DispatcherStep)
