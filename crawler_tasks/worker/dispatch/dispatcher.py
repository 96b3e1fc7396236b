"""The dispatcher: a thread in every worker's main process that moves URLs from the frontier
into the fetch queues when their domain may be fetched, and repairs what dead processes left
behind. It is what keeps the broker small: nothing is published before its domain is ready,
and no task waits for a token.

It only schedules its parts, each with one job:

* :class:`~crawler_tasks.worker.dispatch.rounds.Rounds`: release rounds (release.lua, the broker's
  backlog as budget, host ceilings), every ``dispatch_interval`` or at once while more is
  ready;
* :class:`~crawler_tasks.worker.dispatch.routing.HostRouter`: which fetch process a host's URLs go to
  (host affinity);
* :class:`~crawler_tasks.worker.dispatch.repair.Repair`: URLs of dead workers and lost messages taken
  back, unwritten records written, abandoned crawls finished (every few seconds), lost fetch
  messages published again (rarely).

They publish through the context's one :class:`~crawler_tasks.worker.runtime.handoff.Publisher`, and
ask the broker through one :class:`~crawler_tasks.worker.process.queues.BrokerView`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ...settings import Settings
from ..process.logs import Throttled
from ..process.outage import REDIS_UNAVAILABLE
from ..process.queues import BrokerView
from ..runtime.context import Context
from .repair import RECLAIM_EVERY, Repair
from .rounds import Rounds
from .routing import HostRouter

log = logging.getLogger(__name__)

#: Seconds between two looks for lost fetch messages.
REAP_EVERY = 60.0


class Dispatcher:
    """``broker``: the broker as this process sees it (none: every stage idle, no budget);
    ``joins``: this process is a fetch process with its own queue (host affinity)."""

    def __init__(
        self,
        context: Callable[[], Context],
        settings: Settings,
        *,
        broker: BrokerView | None = None,
        joins: bool = False,
    ) -> None:
        self._context = context
        self.settings = settings
        broker = broker or BrokerView(settings)
        self.router = HostRouter(broker, settings.worker_dead_seconds, joins)
        self.repair = Repair(settings, broker)
        self.rounds = Rounds(settings, broker, self.router, self.repair)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_reclaim = time.monotonic() + RECLAIM_EVERY

    @property
    def more(self) -> bool:
        return self.rounds.more

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crawler-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def tick(self) -> bool:
        """One release round (see :meth:`Rounds.tick`)."""
        ctx = self._context()
        self.router.join(ctx)  # once; here, as it waits out a Redis away or full like a round
        return self.rounds.tick(ctx)

    def reclaim(self) -> int:
        return self.repair.reclaim(self._context())

    def reap(self) -> int:
        return self.repair.reap(self._context())

    def _run(self) -> None:
        every = min(REAP_EVERY, self.settings.visibility_timeout)
        next_reap = time.monotonic() + every
        errors, pause = Throttled(log, "dispatcher tick"), self.settings.dispatch_interval
        while not self._stop.is_set():
            try:
                self.tick()
                busy = self.more
                if time.monotonic() > self._next_reclaim:
                    self._next_reclaim = time.monotonic() + RECLAIM_EVERY
                    self.reclaim()
                if time.monotonic() > next_reap:
                    next_reap = time.monotonic() + every
                    self.reap()
                errors.ok()
                pause = self.settings.dispatch_interval
            except Exception as exc:  # a Redis hiccup must not kill the dispatcher
                errors.failed(exc, expected=isinstance(exc, REDIS_UNAVAILABLE))
                busy, pause = False, min(max(pause * 2, 0.1), 2.0)  # back off while it lasts
                # Heartbeats could not be written either: give workers time to beat again
                # before anything counts as dead.
                wait = self.settings.worker_dead_seconds
                self._next_reclaim = max(self._next_reclaim, time.monotonic() + wait)
                self.router.hold(wait)
            if not busy:
                self._stop.wait(pause)
