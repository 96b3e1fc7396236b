"""The dispatcher: a thread in every worker's main process that moves URLs from the frontier
into the fetch queues when their domain may be fetched (release.lua decides, atomically, so
any number of dispatchers may run at once). It is what keeps the broker small: nothing is
published before its domain is ready, and no task waits for a token.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .settings import Settings
from .worker import Context

log = logging.getLogger(__name__)

Publish = Callable[[str, str, int, str], None]


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
        while not self._stop.is_set():
            try:
                busy = self.tick()
            except Exception:  # a Redis hiccup must not kill the dispatcher
                log.exception("dispatcher tick failed")
                busy = False
            if not busy:
                self._stop.wait(self.settings.dispatch_interval)

    def tick(self) -> bool:
        """One release round over all running crawls; True if anything was released."""
        ctx = self._context()
        busy = False
        for raw in ctx.client.smembers(ctx.keys.running):
            crawl_id = raw.decode()
            opts = ctx.options(crawl_id)
            if opts is None:
                continue
            release = ctx.frontier(opts).release(self.settings.dispatch_batch)
            if release.cancelled:
                self._drain(ctx, crawl_id, release.entries)
            for _domain, depth, url in [] if release.cancelled else release.entries:
                queue = opts.tier(depth, self.settings.medium_max_depth)
                self._publish(crawl_id, url, depth, queue)
            busy = busy or bool(release.entries)
        return busy

    def _drain(self, ctx: Context, crawl_id: str, entries: list[tuple[str, int, str]]) -> None:
        from .pipeline import Final, finalize

        opts = ctx.options(crawl_id)
        assert opts is not None
        for _domain, depth, url in entries:
            finalize(ctx, opts, Final(url, depth, error="cancelled", counters={"cancelled": 1}))
