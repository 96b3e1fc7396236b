"""What one worker process holds: its Redis client and scripts, HTTP fetcher, robots caches,
open output files, and a small cache of the crawls it works on: for each, its
:class:`CrawlStore` (Redis, with this process's memory of known URLs) and its
:class:`~crawler_tasks.worker.runtime.crawl_runtime.CrawlRuntime` (fetching, robots.txt, output),
built together. Built once per process (after the fork, for prefork pools) by :class:`ProcessContext`
and passed to the pipeline functions; nothing here is global.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import redis

from ...settings import Settings
from ...state import connection, events, objects
from ...state.bloom import KnownURLs
from ...state.ceilings import Ceilings
from ...state.options import CrawlOptions
from ...state.output_places import OutputPlaces
from ...state.robots_cache import RobotsCache
from ...state.store import CrawlStore, Process, RedisHandle
from ...state.workers import Heartbeat
from ...web.fetcher import Fetcher
from ...web.profile import RequestProfile
from ..output.outputs import Outputs
from ..output.uploads import Uploads
from ..output.warc import warcinfo_fields
from ..process.liveness import received_fetches
from ..render.browser import BrowserPool
from .addresses import Resolver
from .crawl_runtime import CrawlRuntime, robots_getter
from .handoff import Publisher
from .hooks import Hooks
from .room import Room

log = logging.getLogger(__name__)

Enqueue = Callable[..., None]
#: Crawls whose store (and known-URL memory, ~3.5 MB each at most) a process keeps.
STORES = 8
#: URL hashes remembered per crawl (see KnownURLs).
KNOWN_MAX = 50_000
#: (crawl id, origin) pairs whose robots.txt sitemaps this process has seen.
SITEMAP_MEMO = 10_000


#: Threads a process may add to fetch the other URLs of its ``crawl.fetch_many`` messages
#: (started on demand; a 256-slot pool with batches of 4 needs up to 768).
BATCH_THREADS = 1024
T = TypeVar("T")


#: Redis connections per process at most: threads beyond wait for a free one. (redis-py 8's
#: default pool raises MaxConnectionsError past 100, which a 256-thread pool reached.)
REDIS_CONNECTIONS = 64


def redis_client(settings: Settings) -> redis.Redis:
    client = connection.connect(
        settings.state_url,
        pool_size=REDIS_CONNECTIONS,
        health_check_interval=30,
        socket_keepalive=True,
        socket_timeout=settings.redis_timeout,
        socket_connect_timeout=settings.redis_timeout,
    )
    connection.check_broker(settings.broker_url, client)
    return client


class Context:
    def __init__(
        self,
        settings: Settings,
        publisher: Publisher,
        on_finished: Enqueue,
        send_items: Enqueue | None = None,
    ) -> None:
        self.settings = settings
        self.client = redis_client(settings)
        self.r = RedisHandle.connect(self.client, settings.key_prefix)
        self.keys = self.r.keys
        self.fetcher = Fetcher.from_settings(settings)
        self.outputs = Outputs(gzip_level=settings.warc_gzip_level)
        #: This process in heartbeats and inflight marks: "host-pid".
        self.worker_id = self.outputs.tag
        # A client of its own: a beat never waits behind this process's fetch threads for a
        # pooled connection (a busy process must not look dead).
        self._beat_client = connection.connect(
            settings.state_url, pool_size=1, socket_timeout=5, socket_connect_timeout=5
        )
        self.heartbeat = Heartbeat(
            self._beat_client, self.keys, self.worker_id, held=received_fetches
        )
        #: s3:// crawls' staged segments, closed and uploaded (worker/output/uploads.py).
        self.uploads = Uploads(
            self.outputs,
            settings.output_dir,
            self.client,
            self.keys,
            settings.output_segment_bytes,
            settings.output_segment_seconds,
        )
        #: Whether this process may admit new URLs while Redis nears maxmemory (room.py).
        self.room = Room(self.client, settings.admission_memory_fraction, settings.admission_wait)
        #: Where a URL's next step is published (handoff.py); the dispatcher's too.
        self.publisher = publisher
        #: This process's browser (worker/render/browser.py), started by its first render.
        self.browser = BrowserPool(settings)
        self.on_finished = on_finished
        #: (task name, crawl id, page URL, items): a page's items to the user's on_item task.
        self.send_items = send_items or (lambda *_: None)
        #: The users' extraction hooks this process imported (worker/runtime/hooks.py).
        self.hooks = Hooks()
        #: Hosts' server addresses, resolved for the dispatcher (ip_rate crawls).
        self.addresses = Resolver()
        #: The hosts' shared ceilings (set-ceiling): charged at release, gated at send.
        self.ceilings = Ceilings(self.client, self.keys, self.r.scripts)
        self._process = Process(settings.max_crawl_delay, settings.body_ttl)
        self._stores: OrderedDict[str, tuple[CrawlStore, CrawlRuntime]] = OrderedDict()
        self._robots: dict[RequestProfile, RobotsCache] = {}
        self._lock = threading.Lock()  # threads pools share the caches
        self._robots_lock = threading.Lock()
        self.sitemap_origins: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._batch: ThreadPoolExecutor | None = None

    def side_by_side(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``calls`` at once (the first in this thread, the others on this process's
        batch threads) and return their results; once all have ended, the first exception."""
        if len(calls) <= 1:
            return [call() for call in calls]
        with self._lock:
            if self._batch is None:
                self._batch = ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="crawler-batch")
            pool = self._batch
        futures = [pool.submit(call) for call in calls[1:]]
        outcomes = [_outcome(calls[0])] + [_outcome(f.result) for f in futures]
        for ok, value in outcomes:
            if not ok:
                raise value
        return [value for _, value in outcomes]

    def close(self) -> None:
        self.browser.close()
        self.addresses.close()
        if self._batch is not None:
            self._batch.shutdown(wait=False)
        self.heartbeat.stop()
        self._beat_client.close()
        self.outputs.close()
        self.uploads.stop()  # the segments just closed, while Redis is still there
        self.fetcher.close()
        self.client.close()
        self.client.connection_pool.disconnect()  # its own pool: close() leaves it open

    def store(self, crawl_id: str) -> CrawlStore | None:
        """The crawl's store, or None for a crawl whose options are gone (expired)."""
        pair = self.crawl(crawl_id)
        return None if pair is None else pair[0]

    def crawl(self, crawl_id: str) -> tuple[CrawlStore, CrawlRuntime] | None:
        """The crawl's store and its runtime, built together (one look-up for a URL's visit:
        worker/visit/trip.py), or None for a crawl whose options are gone (expired)."""
        with self._lock:
            pair = self._stores.get(crawl_id)
        if pair is not None:
            return pair
        opts = CrawlStore.read_options(self.r, crawl_id)
        if opts is None:
            return None
        with self._lock:
            pair = self._stores.get(crawl_id)
            if pair is None:
                pair = self._stores[crawl_id] = self._new_crawl(opts)
            while len(self._stores) > STORES:
                self._stores.popitem(last=False)
        return pair

    def crawl_runtime(self, store: CrawlStore) -> CrawlRuntime:
        """The runtime built with ``store`` (fetching, robots.txt, output of its crawl), for
        holders of a store without a URL (the finisher, the sweeps; a visit has both)."""
        with self._lock:
            pair = self._stores.get(store.id)
        if pair is not None and pair[0] is store:
            return pair[1]
        return self._runtime(store)  # a store this cache no longer holds

    def _new_crawl(self, opts: CrawlOptions) -> tuple[CrawlStore, CrawlRuntime]:
        # started_at tells a crawl from an earlier one with the same id; without it the
        # filter's contents are not known to this process.
        known = KnownURLs(KNOWN_MAX) if opts.started_at else None
        # Admission writes wait in place while Redis refuses them for memory (room.py); the
        # dispatcher's release and everything else keep failing at once, as they should.
        admits = self.room.client_for(self.client)
        store = CrawlStore(self.r, opts, self._process, known, admission_client=admits)
        return store, self._runtime(store)

    def _runtime(self, store: CrawlStore) -> CrawlRuntime:
        opts = store.opts
        profile = RequestProfile.build(opts, self.settings.user_agent)
        root = objects.local_root(opts.output, self.settings.output_dir)
        bucket = opts.output if objects.is_url(opts.output) else ""
        info = warcinfo_fields(opts.crawl_id, opts.to_json())
        note = OutputPlaces(self.client, store.ck.places).note
        return CrawlRuntime(
            opts,
            profile,
            self.fetcher,
            self.robots(profile),
            self.outputs,
            (opts.crawl_id, root, info, bucket, note),
            functools.partial(events.emit, store.client, store.ck, "request_started", store.id),
        )

    def first_sitemap_look(self, crawl_id: str, origin: str) -> bool:
        """True the first time this process looks at ``origin``'s sitemaps for a crawl."""
        with self._lock:
            if (crawl_id, origin) in self.sitemap_origins:
                return False
            self.sitemap_origins[(crawl_id, origin)] = None
            while len(self.sitemap_origins) > SITEMAP_MEMO:
                self.sitemap_origins.popitem(last=False)
            return True

    def robots(self, profile: RequestProfile) -> RobotsCache:
        """robots.txt as crawls of ``profile`` ask for it (address policy, user agent,
        headers, proxy): one cache for all of them."""
        with self._robots_lock:  # its own: _new_crawl calls this holding self._lock
            cache = self._robots.get(profile)
            if cache is None:
                cache = self._robots[profile] = RobotsCache(
                    self.client,
                    self.keys,
                    ttl=self.settings.robots_ttl,
                    error_ttl=self.settings.robots_error_ttl,
                    http_get=robots_getter(self.fetcher, profile),
                )
        return cache


def _outcome(call: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, call()
    except Exception as exc:  # raised by side_by_side once every call has ended
        return False, exc


class ProcessContext:
    """This process's :class:`Context`, built on first use and again after a fork (a prefork
    pool's children must not share the parent's sockets). Owned by the Celery app
    (``app.conf.crawler_runtime``), so a test's app has a runtime of its own."""

    def __init__(self, build: Callable[[], Context]) -> None:
        self._build = build
        self._ctx: Context | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def context(self) -> Context:
        pid = os.getpid()
        if self._ctx is None or self._pid != pid:
            with self._lock:
                if self._ctx is None or self._pid != pid:
                    self._ctx, self._pid = self._build(), pid
        return self._ctx

    def close(self) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None and self._pid == os.getpid():
            ctx.browser.close()
            ctx.heartbeat.stop()
            ctx.outputs.close()
