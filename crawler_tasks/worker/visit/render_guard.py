"""The crawler's rules for every request a rendered page makes (worker/render/browser.py routes each
one here, off the browser's event loop), in the order that keeps a refused request from
costing anything:

1. blocked resource types (``render_block``: images, fonts, media by default) and methods
   other than GET/HEAD (a crawler does not post forms or beacons) are aborted;
2. at most ``render_max_subrequests`` requests and ``render_max_bytes`` bytes per page;
3. robots.txt of the page's own origin, for requests to that origin;
4. the address guard (web/netguard.py): a name is resolved and every address vetted *before*
   a token is taken or a byte sent (a metadata address is never allowed; private ones only
   with ``allow_private_networks``); the fetcher vets and pins it again when it connects;
5. a token of the request's host bucket and a slot of its send gates (subrequest.lua: the
   host's, its server address's with ``ip_rate``; ceiling_gate.lua for a host with a shared
   ceiling): the request waits for them, within the render deadline, so rendered pages keep
   every host under its rate cluster-wide (worker/runtime/send_gate.py's SubrequestSlot);
6. the request, through the crawler's fetcher (its redirects vetted hop by hop), its slot
   looked at again just before it is written: taken anew if the thread lost the CPU since
   (the host's pages take their slots from it meanwhile).

The answer is fulfilled into the page; the counts go to the crawl's counters.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

from ...errors import BlockedAddress, CrawlerError
from ...state.formats import Counter
from ...web import netguard
from ...web.urls import origin_of
from ..render.browser import Answer
from ..runtime.send_gate import SubrequestSlot
from .trip import Visit

#: Response headers not passed to the browser: the fetcher has decoded and measured the body.
_HOP_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "set-cookie"})


class SubrequestGuard:
    def __init__(self, page: Visit, until: float) -> None:
        self.ctx, self.store, self.runtime, self.until = page.ctx, page.store, page.runtime, until
        self.origin = origin_of(page.url)
        self.config = page.store.render_config  # the crawl's limits, not this process's
        self.slots = self.made = self.blocked = self.refused = self.bytes = 0
        self._lock = threading.Lock()
        # Time with at least one subrequest waiting for its token or slot (held()): closed
        # stretches, and since when the open one began (waiting: how many wait now).
        self._held, self._since, self._waiting = 0.0, 0.0, 0

    def __call__(self, url: str, method: str, resource_type: str) -> Answer:
        if not self._admissible(url, method, resource_type):
            self._count("refused")
            return None
        try:
            self._vet_address(url)
        except BlockedAddress:
            self._count("blocked")
            return None
        except CrawlerError:  # cannot be resolved: the page gets a failed request
            self._count("refused")
            return None
        slot = SubrequestSlot(self.store, self.ctx.ceilings, self.store.domain_of(url), self._hold)
        if not slot.take(self.until):
            self._count("refused")
            return None
        return self._fetch(url, slot)

    def held(self) -> float:
        """Seconds so far during which a subrequest of the page waited for its host's token
        or send-gate slot: politeness holding the page (render_settle.py does not count it
        against the settle)."""
        with self._lock:
            return self._held + (time.monotonic() - self._since if self._waiting else 0.0)

    def _hold(self, by: int) -> None:
        with self._lock:
            now = time.monotonic()
            if self._waiting:
                self._held += now - self._since
            self._since, self._waiting = now, self._waiting + by

    def counters(self) -> dict[str, int]:
        return {
            Counter.SUBREQUESTS.value: self.made,
            Counter.SUBREQUESTS_BLOCKED.value: self.blocked,
            Counter.SUBREQUESTS_REFUSED.value: self.refused,
        }

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def _admissible(self, url: str, method: str, resource_type: str) -> bool:
        limits, opts = self.config, self.store.opts
        if resource_type in limits.blocked or method not in ("GET", "HEAD"):
            return False
        if urlsplit(url).scheme not in ("http", "https"):
            return False
        with self._lock:
            if self.slots >= limits.max_subrequests or self.bytes >= limits.max_bytes:
                return False
            self.slots += 1  # taken before the wait, so that racing requests see it
        if opts.obey_robots and origin_of(url) == self.origin:
            domain, polite = self.store.domain_of(url), self.store.politeness
            # Read again if it expired: that request is charged to the host as a fetch's is.
            robots = self.runtime.robots.get(self.origin, lambda: polite.extra_request(domain))
            return robots.allowed(opts.robots_agent, url)
        return True

    def _vet_address(self, url: str) -> None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        allow = self.store.opts.allow_private_networks
        netguard.check_literal(host, allow_private=allow)
        netguard.check_host(host, port, allow_private=allow)

    def _fetch(self, url: str, slot: SubrequestSlot) -> Answer:
        crawl = self.runtime
        args = crawl.profile.fetch_args()
        with self._lock:
            args["max_body_bytes"] = max(1, self.config.max_bytes - self.bytes)
        try:
            with crawl.fetcher.gated(slot.gate):
                response = crawl.fetcher.get(url, **args)
            slot.sent(response.sent_at)
        except BlockedAddress:  # a redirect hop to a refused address
            self._count("blocked")
            return None
        except CrawlerError:
            return None
        with self._lock:
            self.bytes += len(response.body)
            self.made += 1
        headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_HEADERS}
        return response.status, headers, response.body
