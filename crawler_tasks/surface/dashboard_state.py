"""What every dashboard handler reads, as typed attributes of one object (Flower keeps them on
its ``Application``): the Redis client, the settings, the thread pool for Redis reads, the
crawls' handles and their host tables. surface/dashboard_app.py builds it and hands it to each
handler (surface/dashboard_views.py) through Tornado's ``initialize``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import redis

from ..settings import Settings
from .crawl import Crawl
from .host_table import HostTables

#: Crawl handles kept (each holds its store: key names and options, read once).
HANDLES_KEPT = 256
#: Threads for the Redis reads (Tornado's loop must not wait on Redis).
READ_THREADS = 8


@dataclass
class DashboardState:
    client: redis.Redis
    settings: Settings
    #: The pages' files (surface/dashboard_static).
    static: str
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(READ_THREADS, thread_name_prefix="dashboard")
    )
    hosts: HostTables = field(default_factory=HostTables)
    _handles: OrderedDict[str, Crawl] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def auth(self) -> str:
        """``user:password`` every request must give ("": loopback only, no auth)."""
        return self.settings.dashboard_auth

    @property
    def operator(self) -> str:
        """Who the action log says acted: the auth's user name, else "dashboard"."""
        return self.auth.partition(":")[0] or "dashboard"

    def crawl(self, crawl_id: str) -> Crawl:
        """The crawl's handle, kept between requests (a crawl's options never change, so they
        are read once); UnknownCrawl if it never was or has expired."""
        with self._lock:
            crawl = self._handles.get(crawl_id)
            if crawl is not None:
                self._handles.move_to_end(crawl_id)
        if crawl is not None and crawl.exists():
            return crawl
        crawl = Crawl(crawl_id, settings=self.settings, client=self.client)
        crawl.options  # noqa: B018 - UnknownCrawl here, not halfway through a handler
        with self._lock:
            self._handles[crawl_id] = crawl
            while len(self._handles) > HANDLES_KEPT:
                self._handles.popitem(last=False)
        return crawl

    def forget(self, crawl_id: str) -> None:
        with self._lock:
            self._handles.pop(crawl_id, None)
