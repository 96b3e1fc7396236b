"""Server addresses of hosts, for a crawl that limits requests per address (state/pacing.py).

release.lua does not release a grouped crawl's host before it knows the host's address: it
asks for it instead, and the dispatcher hands the name to this small pool, which resolves it
with the SSRF guard's own resolution (web/netguard.py, what the fetch will pin) and stores it
(address.lua wakes the host). So a host's first request, robots.txt included, already counts
against its address: 12 new names on one address do not all go at once. The fetch then
reports the address it really used (a resolver may rotate its answers), which renews it.
A name that does not resolve or is blocked goes ungrouped for a minute: its fetch fails as it
would have, with the guard's own error.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from ...errors import CrawlerError
from ...state.store import CrawlStore
from ...web import netguard

log = logging.getLogger(__name__)

#: Names resolved at once (a slow DNS answer must not hold the dispatcher's releases).
THREADS = 4


class Resolver:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: (crawl, host) being resolved: release.lua asks again until the answer is stored.
        self._asked: set[tuple[str, str]] = set()

    def ask(self, store: CrawlStore, hosts: list[str]) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="crawler-resolve")
            for host in hosts:
                if (store.id, host) not in self._asked:
                    self._asked.add((store.id, host))
                    self._pool.submit(self._resolve, store, host)

    def _resolve(self, store: CrawlStore, host: str) -> None:
        try:
            allow = store.opts.allow_private_networks
            try:
                ip: str | None = netguard.check_host(host, 80, allow_private=allow)[0]
            except CrawlerError:
                ip = None
            store.politeness.set_address(host, ip)
        except Exception:  # Redis away: release.lua asks again in a few seconds
            log.warning("the address of %s could not be stored", host, exc_info=True)
        finally:
            with self._lock:
                self._asked.discard((store.id, host))

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
