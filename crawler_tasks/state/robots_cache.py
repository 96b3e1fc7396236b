"""robots.txt per origin, shared by every worker: an in-process LRU in front of one Redis key
per origin (``Keys.robots``), filled over HTTP on a miss. The rules themselves are
:mod:`crawler_tasks.web.robots`; this module only decides where a parsed file is kept and for
how long (RFC 9309 section 2.4: cached at most a day; a 5xx/unreachable file sooner).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

import redis

from ..errors import TLSError
from ..web.robots import MAX_REDIRECTS, HttpGet, Robots, dump, load, policy_for_response
from .keys import Keys

# A certificate this process does not trust is its own verdict (CRAWLER_CA_BUNDLE is a process
# setting): kept in its LRU only, never shared, so workers given the CA (or restarted with it)
# ask again at once instead of inheriting the failure for robots_error_ttl.
_OWN_VERDICT = TLSError.reason + ":"


#: Seconds a thread waits for another's lookup of the same origin before its own.
FLIGHT_WAIT = 60.0


class RobotsCache:
    """robots.txt per origin: in-process LRU, then Redis (shared by all workers), then HTTP.

    Two workers missing the same origin at once both fetch it and store the same value, which
    is harmless; a lock would cost a round trip on every miss to save one rare request.
    """

    def __init__(
        self,
        redis: redis.Redis,
        keys: Keys,
        ttl: int,
        error_ttl: int,
        http_get: HttpGet,
        lru_size: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis, self._keys, self._http_get, self._clock = redis, keys, http_get, clock
        self._ttl, self._error_ttl, self._lru_size = ttl, error_ttl, lru_size
        self._lru: OrderedDict[str, tuple[float, Robots]] = OrderedDict()
        self._lock = threading.Lock()  # Celery's thread pools share one instance
        self._flights: dict[str, threading.Event] = {}  # origins being looked up

    def get(self, origin: str, fetched: Callable[[], object] | None = None) -> Robots:
        """The rules of ``origin`` (``scheme://host[:port]``). ``fetched`` is called after
        robots.txt was requested over HTTP (not on a cache hit): politeness charges the host's
        bucket for that request there."""
        robots = self._from_lru(origin)
        if robots is not None:
            return robots
        # One thread of this process looks an origin up (Redis, then HTTP); the others wait
        # for its answer instead of each asking: a host's first pages arrive together, and
        # every thread that missed also paid a round trip, often robots.txt itself and its
        # charge to the host (issue 32). A lookup that fails leaves the others to try alone.
        with self._lock:
            flight = self._flights.get(origin)
            leading = flight is None
            if flight is None:
                flight = self._flights[origin] = threading.Event()
        if not leading:
            flight.wait(FLIGHT_WAIT)
            robots = self._from_lru(origin)
            if robots is not None:
                return robots
        try:
            return self._look_up(origin, fetched)
        finally:
            if leading:
                with self._lock:
                    self._flights.pop(origin, None)
                flight.set()

    def _look_up(self, origin: str, fetched: Callable[[], object] | None) -> Robots:
        """``get`` past the LRU: Redis, then HTTP."""
        robots = self._from_lru(origin)
        if robots is None:
            robots, ttl = self._from_redis(origin)
            if robots is None:
                try:
                    robots = self._fetch(origin)
                finally:
                    if fetched is not None:
                        fetched()
                ttl = self._ttl_of(robots)
                if not robots.why.startswith(_OWN_VERDICT):
                    self._redis.set(self._keys.robots(origin), dump(robots), ex=ttl)
            self._remember(origin, robots, ttl)
        return robots

    def known(self, origin: str) -> Robots | None:
        """The rules of ``origin`` if this process holds them now; never a round trip."""
        return self._from_lru(origin)

    def _ttl_of(self, robots: Robots) -> int:
        # disallow-all only ever comes from 5xx/unreachable: retry it sooner.
        return max(1, self._error_ttl if robots.kind == "disallow" else self._ttl)

    def _from_lru(self, origin: str) -> Robots | None:
        with self._lock:
            expires, robots = self._lru.get(origin, (0.0, None))
            if robots is None or expires <= self._clock():
                self._lru.pop(origin, None)
                return None
            self._lru.move_to_end(origin)
            return robots

    def _remember(self, origin: str, robots: Robots, ttl: int) -> None:
        with self._lock:
            self._lru[origin] = (self._clock() + ttl, robots)
            self._lru.move_to_end(origin)
            while len(self._lru) > max(0, self._lru_size):
                self._lru.popitem(last=False)

    def _from_redis(self, origin: str) -> tuple[Robots | None, int]:
        """(cached rules or None, seconds they have left)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.get(self._keys.robots(origin))
        pipe.ttl(self._keys.robots(origin))
        raw, left = pipe.execute()
        robots = load(raw) if raw is not None else None
        if robots is None:
            return None, 0
        # The LRU must not outlive the shared copy (-1: stored without expiry).
        return robots, left if left > 0 else self._ttl_of(robots)

    def _fetch(self, origin: str) -> Robots:
        """GET ``origin/robots.txt``, following up to :data:`MAX_REDIRECTS` redirects."""
        url = origin + "/robots.txt"
        for _ in range(MAX_REDIRECTS + 1):
            status, location, body = self._http_get(url)
            if status is None:  # not had at all: ``location`` says why
                return policy_for_response(None, body, why=location or "unreachable")
            if not 300 <= status < 400 or not location:
                return policy_for_response(status, body)
            url = urljoin(url, location)
            if urlsplit(url).scheme not in ("http", "https"):
                break
        # RFC 9309 2.3.1.2: past five redirects (or off the web) robots.txt MAY be taken as
        # unavailable, as Google does: a redirect loop must not block a whole site for a day.
        return Robots.allow_all()
