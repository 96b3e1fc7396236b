"""A worker process's life around its tasks, told by Celery's signals and one bootstep.

At start: a bad ``CRAWLER_*`` value or a render worker without its browser stops the process
with one line; each pool process builds its context (and so beats) before its first task; a
fetch process takes its own direct queue; the main process runs the frontier dispatcher
(:class:`DispatcherStep`); beat loads the schedules file. At stop: a task riding out a Redis
outage gives up (:data:`shutting_down`), a fetch process leaves the holders of hosts and hands
its queue back, and each process closes its context. The tasks themselves are tasks.py's,
which imports this module so that its handlers are connected wherever a task can run.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

from ..settings import Settings
from ..state.schedules import Schedules
from .dispatch.departure import Departure
from .dispatch.dispatcher import Dispatcher
from .dispatch.routing import own_queue
from .output.files import process_tag
from .process import malloc  # noqa: F401 (its worker_init handler caps the malloc arenas)
from .process.app import RENDER_QUEUE, app
from .process.queues import BrokerView
from .runtime.context import Context, ProcessContext

log = logging.getLogger(__name__)


def settings() -> Settings:
    value: Settings = app.conf.crawler_settings
    return value


def context() -> Context:
    """This process's context (see :class:`ProcessContext`)."""
    runtime: ProcessContext = app.conf.crawler_runtime
    return runtime.context()


#: Set when this worker begins its warm shutdown. A task riding out a Redis outage then gives
#: up at once instead of holding the shutdown for ``redis_outage_wait``: its message is
#: redelivered (acks_late) or its URL taken back by the crawl's reclaim once this worker's
#: heartbeat stops. Without it a worker whose Redis is gone for good (an embedded crawl's
#: command killed) never exits.
shutting_down = threading.Event()


@worker_shutting_down.connect
def _stop_riding_out(**_: Any) -> None:
    shutting_down.set()


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
    checkout = Path(__file__).resolve().parents[2]  # crawler_tasks/worker/lifecycle.py -> root
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
