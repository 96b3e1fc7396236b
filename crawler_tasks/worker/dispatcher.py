"""The dispatcher: a thread in every worker's main process that moves URLs from the frontier
into the fetch queues when their domain may be fetched (release.lua decides, atomically, so
any number of dispatchers may run at once). It is what keeps the broker small: nothing is
published before its domain is ready, and no task waits for a token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..settings import Settings
from .context import Context
from .logs import Throttled
from .outage import REDIS_UNAVAILABLE
from .recorder import Final, finalize

log = logging.getLogger(__name__)

Publish = Callable[[str, str, int, str], None]

#: Seconds between two looks for lost fetch messages.
REAP_EVERY = 60.0


class Dispatcher:
    def __init__(self, context: Callable[[], Context], publish: Publish, settings: Settings):
        self._context = context
        self._publish = publish
        self.settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crawler-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        every = min(REAP_EVERY, self.settings.visibility_timeout)
        next_reap = time.monotonic() + every
        errors, pause = Throttled(log, "dispatcher tick"), self.settings.dispatch_interval
        while not self._stop.is_set():
            try:
                busy = self.tick()
                if time.monotonic() > next_reap:
                    next_reap = time.monotonic() + every
                    self.reap()
                errors.ok()
                pause = self.settings.dispatch_interval
            except Exception as exc:  # a Redis hiccup must not kill the dispatcher
                errors.failed(exc, expected=isinstance(exc, REDIS_UNAVAILABLE))
                busy, pause = False, min(max(pause * 2, 0.1), 2.0)  # back off while it lasts
            if not busy:
                self._stop.wait(pause)

    def reap(self) -> int:
        """Publish again fetches whose message never reached a worker. Rare (a dispatcher
        killed between release.lua and the publish); a duplicate is harmless because every
        task is idempotent, so the threshold only has to exceed any normal queueing delay."""
        ctx = self._context()
        older_than = self.settings.visibility_timeout + self.settings.total_timeout
        n = 0
        for raw in ctx.client.smembers(ctx.keys.running):
            store = ctx.store(raw.decode())
            if store is None:
                continue
            for url, depth in store.ledger.stale_releases(older_than):
                log.warning("re-publishing lost fetch of %s (crawl %s)", url, store.id)
                tier = store.opts.tier(depth, self.settings.medium_max_depth)
                self._publish(store.id, url, depth, tier)
                n += 1
        return n

    def tick(self) -> bool:
        """One release round over all running crawls; True if anything was released."""
        ctx = self._context()
        busy = False
        for raw in ctx.client.smembers(ctx.keys.running):
            store = ctx.store(raw.decode())
            if store is None:
                continue
            s = self.settings
            release = store.frontier.release(s.dispatch_batch, s.lease_seconds)
            for _domain, depth, url in release.entries:
                if release.cancelled:  # drained unfetched: recorded as cancelled here
                    finalize(ctx, store, Final.cancelled(url, depth))
                else:
                    self._publish(store.id, url, depth, store.opts.tier(depth, s.medium_max_depth))
            busy = busy or bool(release.entries)
        return busy
