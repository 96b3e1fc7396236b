"""The robots.txt cache (``crawler_tasks.web.robots.RobotsCache``) against a real Redis: fetched once
an origin, redirects followed and bounded, the in-process LRU bounded by size and TTL and never
outliving Redis. The parser and Google's conformance cases: tests/unit/test_robots.py."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from crawler_tasks.state.keys import Keys
from crawler_tasks.state.robots_cache import RobotsCache
from crawler_tasks.web.robots import MAX_REDIRECTS
from tests.unit.test_robots import UA

# --- the cache -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A private redis-server on a free port, never the shared one on 6379."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not on PATH")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(
        [*args, "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def rdb(redis_port: int) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_port)
    client.flushall()
    yield client
    client.close()


Response = tuple[int | None, str | None, bytes]


class FakeWeb:
    """The injected transport: canned responses by URL (404 otherwise), and a call log."""

    def __init__(self, responses: dict[str, Response]) -> None:
        self.responses = responses
        self.calls: list[str] = []

    def __call__(self, url: str) -> Response:
        self.calls.append(url)
        return self.responses.get(url, (404, None, b""))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


KEYS = Keys("t")


TTL, ERROR_TTL = 3600, 60


DISALLOW_X = (200, None, b"User-agent: *\nDisallow: /x\n")


def _cache(rdb: redis.Redis, web: FakeWeb, **kw: Any) -> RobotsCache:
    return RobotsCache(rdb, KEYS, TTL, ERROR_TTL, web, **kw)


def test_cache_fetches_once_per_origin(rdb: redis.Redis) -> None:
    web = FakeWeb({"http://a/robots.txt": DISALLOW_X, "https://b:8443/robots.txt": DISALLOW_X})
    first, second = _cache(rdb, web), _cache(rdb, web)  # two workers sharing Redis
    for cache in (first, second, first, second):
        robots = cache.get("http://a")
        assert not robots.allowed(UA, "http://a/x") and robots.allowed(UA, "http://a/y")
    assert web.calls == ["http://a/robots.txt"]
    second.get("https://b:8443")
    first.get("https://b:8443")
    assert web.calls == ["http://a/robots.txt", "https://b:8443/robots.txt"]
    stored = json.loads(rdb.get(KEYS.robots("http://a")) or "")
    assert stored == {"kind": "parsed", "text": "User-agent: *\nDisallow: /x\n"}
    assert ERROR_TTL < rdb.ttl(KEYS.robots("http://a")) <= TTL


def test_threads_of_one_process_look_an_origin_up_once(rdb: redis.Redis) -> None:
    """A host's first pages arrive together: one thread asks Redis and the web, the others
    wait for its answer (each used to pay a round trip, most a robots.txt request too)."""
    release = threading.Event()

    class SlowWeb(FakeWeb):
        def __call__(self, url: str) -> Response:
            release.wait(5)
            return super().__call__(url)

    web = SlowWeb({"http://a/robots.txt": DISALLOW_X})
    cache, charged = _cache(rdb, web), []
    got: list[bool] = []

    def fetch_page() -> None:
        robots = cache.get("http://a", lambda: charged.append(1))
        got.append(robots.allowed(UA, "http://a/x"))

    threads = [threading.Thread(target=fetch_page) for _ in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # all 20 are in get() now: one fetching, the others waiting
    release.set()
    for t in threads:
        t.join(10)
    assert got == [False] * 20
    assert web.calls == ["http://a/robots.txt"] and charged == [1]


@pytest.mark.parametrize(
    ("response", "kind", "ttl"),
    [
        ((404, None, b"User-agent: *\nDisallow: /"), "allow", TTL),
        ((403, None, b""), "allow", TTL),
        ((503, None, b"User-agent: *\nAllow: /"), "disallow", ERROR_TTL),
        ((None, None, b""), "disallow", ERROR_TTL),
    ],
)
def test_cache_status(rdb: redis.Redis, response: Response, kind: str, ttl: int) -> None:
    web = FakeWeb({"http://a/robots.txt": response})
    assert _cache(rdb, web).get("http://a").kind == kind
    assert _cache(rdb, web).get("http://a").kind == kind  # a second worker reads Redis
    assert len(web.calls) == 1
    assert json.loads(rdb.get(KEYS.robots("http://a")) or "")["kind"] == kind
    assert ttl - 5 < rdb.ttl(KEYS.robots("http://a")) <= ttl


def test_cache_follows_redirect_chain(rdb: redis.Redis) -> None:
    web = FakeWeb(
        {
            "http://a/robots.txt": (301, "/moved/robots.txt", b""),
            "http://a/moved/robots.txt": (302, "https://cdn.example/r.txt", b""),
            "https://cdn.example/r.txt": (307, "../final.txt?v=2", b""),
            # Reached only if ".." were sent unresolved.
            "https://cdn.example/../final.txt?v=2": (500, None, b""),
            "https://cdn.example/final.txt?v=2": DISALLOW_X,
        }
    )
    robots = _cache(rdb, web).get("http://a")
    assert robots.kind == "parsed" and not robots.allowed(UA, "http://a/x")
    assert web.calls == [
        "http://a/robots.txt",
        "http://a/moved/robots.txt",
        "https://cdn.example/r.txt",
        "https://cdn.example/final.txt?v=2",
    ]


def _chain(redirects: int) -> dict[str, Response]:
    """robots.txt redirected ``redirects`` times, then the rules."""
    urls = ["/robots.txt", *(f"/r{i}" for i in range(1, redirects)), "/final"]
    hops = zip(urls[:-1], urls[1:], strict=True)
    web: dict[str, Response] = {"http://a" + u: (302, v, b"") for u, v in hops}
    web["http://a/final"] = DISALLOW_X
    return web


def test_cache_follows_five_redirects(rdb: redis.Redis) -> None:
    web = FakeWeb(_chain(MAX_REDIRECTS))
    assert _cache(rdb, web).get("http://a").kind == "parsed"
    assert len(web.calls) == MAX_REDIRECTS + 1 and web.calls[-1] == "http://a/final"


def test_cache_stops_after_five_redirects(rdb: redis.Redis) -> None:
    web = FakeWeb(_chain(MAX_REDIRECTS + 1))
    robots = _cache(rdb, web).get("http://a")
    assert robots.kind == "allow"  # RFC 9309 2.3.1.2: unavailable
    assert len(web.calls) == MAX_REDIRECTS + 1
    assert "http://a/final" not in web.calls


def test_cache_redirect_loop_bounded(rdb: redis.Redis) -> None:
    web = FakeWeb(
        {
            "http://a/robots.txt": (301, "http://b/robots.txt", b""),
            "http://b/robots.txt": (301, "http://a/robots.txt", b""),
        }
    )
    assert _cache(rdb, web).get("http://a").kind == "allow"
    assert len(web.calls) == MAX_REDIRECTS + 1
    assert _cache(rdb, web).get("http://a").kind == "allow"
    assert len(web.calls) == MAX_REDIRECTS + 1  # the verdict was cached


@pytest.mark.parametrize("location", [None, "", "ftp://a/robots.txt", "javascript:alert(1)"])
def test_cache_unusable_redirect(rdb: redis.Redis, location: str | None) -> None:
    web = FakeWeb({"http://a/robots.txt": (302, location, b"")})
    assert _cache(rdb, web).get("http://a").kind == "allow"
    assert web.calls == ["http://a/robots.txt"]


def test_cache_lru_expires_with_ttl(rdb: redis.Redis) -> None:
    web, clock = FakeWeb({"http://a/robots.txt": DISALLOW_X}), FakeClock()
    cache = _cache(rdb, web, clock=clock)
    cache.get("http://a")
    rdb.flushall()  # from here on only the LRU knows the origin
    clock.now += TTL - 1
    cache.get("http://a")
    assert len(web.calls) == 1
    clock.now += 2
    cache.get("http://a")
    assert len(web.calls) == 2


def test_cache_lru_does_not_outlive_redis(rdb: redis.Redis) -> None:
    web, clock = FakeWeb({}), FakeClock()
    rdb.set(KEYS.robots("http://a"), '{"kind":"disallow","text":""}', ex=30)
    cache = _cache(rdb, web, clock=clock)
    assert cache.get("http://a").kind == "disallow"
    assert web.calls == []
    rdb.flushall()
    clock.now += 31
    assert cache.get("http://a").kind == "allow"  # refetched: 404
    assert web.calls == ["http://a/robots.txt"]


def test_cache_lru_is_bounded(rdb: redis.Redis) -> None:
    web = FakeWeb({})
    cache = _cache(rdb, web, lru_size=2)
    for origin in ("http://a", "http://b", "http://a", "http://c"):  # b is least recent
        cache.get(origin)
    rdb.flushall()
    cache.get("http://a")
    cache.get("http://c")
    assert len(web.calls) == 3
    cache.get("http://b")
    assert web.calls[-1] == "http://b/robots.txt" and len(web.calls) == 4


@pytest.mark.parametrize(
    "value", ["not json", '{"kind":"weird","text":""}', "[]", '{"kind":"parsed"}']
)
def test_cache_unreadable_value_refetched(rdb: redis.Redis, value: str) -> None:
    rdb.set(KEYS.robots("http://a"), value)
    web = FakeWeb({"http://a/robots.txt": DISALLOW_X})
    assert _cache(rdb, web).get("http://a").kind == "parsed"
    assert len(web.calls) == 1
    assert json.loads(rdb.get(KEYS.robots("http://a")) or "")["kind"] == "parsed"
