"""One process of bench/engine_model.py (run as a subprocess, not a benchmark itself).

    .venv/bin/python bench/_engine_model.py MODE SEEDS CA REDIS_URL CONCURRENCY PER_HOST OUT

Crawls the hosts whose roots are in ``SEEDS`` (one URL a line) breadth first, following links
to the same host, with one of two fetch engines and the same work a page otherwise:

* ``threads``: ``CONCURRENCY`` threads, each taking a URL, fetching it with one shared
  ``requests.Session`` (kept connections, ``PER_HOST`` a host, a semaphore each), as a fetch
  process of ours does;
* ``asyncio``: one event loop, ``CONCURRENCY`` coroutines, ``aiohttp`` with
  ``limit_per_host=PER_HOST``, the Redis calls through ``redis.asyncio``.

A page, either way: the body (gzip, inflated by the client), our own parser
(``crawler_tasks.web.page.extract``: decode, lxml, links) and ``ROUND_TRIPS`` Redis script calls
of ``SCRIPT_COMMANDS`` commands each, each its own round trip, as ours makes about four a page.
No robots.txt, no WARC, no accounting: what differs is the engine only. Writes ``OUT`` (JSON):
pages, errors, CPU seconds of the whole process (every thread), wall seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import resource
import ssl
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.web.page import extract  # noqa: E402

#: A fetch in the calling thread (URL -> body, headers), and what closes its connections.
Engine = tuple[Callable[[str], tuple[bytes, dict[str, str]]], Callable[[], None]]
ROUND_TRIPS = int(os.environ.get("MODEL_ROUND_TRIPS", "3"))
SCRIPT_COMMANDS = 10
#: A stand-in for a page's scripts: counters and a hash field, ``SCRIPT_COMMANDS`` in all.
SCRIPT = """
local t = redis.call('TIME')
redis.call('HSET', KEYS[2], ARGV[1], t[1])
for i = 1, 6 do redis.call('HINCRBY', KEYS[1], 'f' .. i, 1) end
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('HGET', KEYS[1], 'f1')
"""
KEYS = ["model:stats", "model:inflight"]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def same_host_links(body: bytes, url: str, headers: dict[str, str]) -> list[str]:
    host = urlsplit(url).netloc
    page = extract(body, url, headers=headers)
    return [u for u in page.links if urlsplit(u).netloc == host]


def requests_get(ca: str, per_host: int, conc: int) -> Engine:
    """A fetch in the calling thread: one shared requests.Session, kept connections."""
    import requests
    from requests.adapters import HTTPAdapter

    session = requests.Session()
    session.trust_env = False  # no proxy, netrc or CA bundle from the environment
    session.mount("https://", HTTPAdapter(pool_connections=1024, pool_maxsize=per_host))

    def get(url: str) -> tuple[bytes, dict[str, str]]:
        resp = session.get(url, timeout=30, verify=ca)
        return resp.content, dict(resp.headers)

    return get, session.close


def our_get(ca: str, per_host: int, conc: int) -> Engine:
    """A fetch in the calling thread through our own fetcher (web/fetcher.py: pinned
    addresses, kept TLS connections, the body read in bounded steps, a deadline)."""
    from crawler_tasks.web.fetcher import Fetcher

    fetcher = Fetcher(
        user_agent="engine-model",
        connect_timeout=10,
        read_timeout=30,
        total_timeout=60,
        max_body_bytes=10 * 2**20,
        max_redirects=5,
        ca_bundle=ca,
    )

    def get(url: str) -> tuple[bytes, dict[str, str]]:
        resp = fetcher.get(url, allow_private=True)  # the model's web is on loopback
        return resp.body, resp.headers

    return get, fetcher.close


def loop_get(ca: str, per_host: int, conc: int) -> Engine:
    """A fetch handed to one event loop in its own thread (aiohttp), the calling thread
    waiting for its answer: the HTTP exchange off the threads, the rest on them."""
    import aiohttp

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def make() -> aiohttp.ClientSession:
        ctx = ssl.create_default_context(cafile=ca)
        connector = aiohttp.TCPConnector(limit=conc, limit_per_host=per_host, ssl=ctx)
        return aiohttp.ClientSession(connector=connector)

    session = asyncio.run_coroutine_threadsafe(make(), loop).result()

    async def fetch(url: str) -> tuple[bytes, dict[str, str]]:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            return await resp.read(), dict(resp.headers)

    def get(url: str) -> tuple[bytes, dict[str, str]]:
        return asyncio.run_coroutine_threadsafe(fetch(url), loop).result()

    def close() -> None:
        asyncio.run_coroutine_threadsafe(session.close(), loop).result()

    return get, close


class Frontier:
    """The model's crawl state, shared by the threads: URLs to fetch (a queue that wakes one
    thread a put, as Celery's pool), URLs seen, what is outstanding."""

    def __init__(self, seeds: list[str], threads: int) -> None:
        self.seen, self.work = set(seeds), queue.SimpleQueue()
        for s in seeds:
            self.work.put(s)
        self.threads, self.lock = threads, threading.Lock()
        self.pending, self.pages, self.errors = len(seeds), 0, 0

    def done(self, links: list[str] | None) -> None:
        """A URL is done (``None``: it failed); its new links queued. The last one stops
        every thread."""
        with self.lock:
            fresh = [u for u in links or [] if u not in self.seen]
            self.seen.update(fresh)
            self.pending += len(fresh) - 1
            self.pages += 1
            self.errors += links is None
            finished = not self.pending
        for u in fresh:
            self.work.put(u)
        for _ in range(self.threads if finished else 0):
            self.work.put(None)


ENGINES = {"threads": requests_get, "ours": our_get, "hybrid": loop_get}


def run_threads(
    seeds: list[str], ca: str, redis_url: str, conc: int, per_host: int, engine: str
) -> dict:
    from crawler_tasks.state.connection import connect

    get, close = ENGINES[engine](ca, per_host, conc)
    client = connect(redis_url, pool_size=64)  # our state client, as a fetch process's
    script = client.register_script(SCRIPT)
    gates: dict[str, threading.BoundedSemaphore] = {}
    frontier = Frontier(seeds, conc)

    def one(url: str) -> list[str]:
        host = urlsplit(url).netloc
        with gates.setdefault(host, threading.BoundedSemaphore(per_host)):
            body, headers = get(url)
        links = same_host_links(body, url, headers)
        for _ in range(ROUND_TRIPS):
            script(keys=KEYS, args=[url])
        return links

    def worker() -> None:
        while (url := frontier.work.get()) is not None:
            try:
                frontier.done(one(url))
            except Exception as exc:
                if not frontier.errors:
                    print(f"{url}: {exc!r}", file=sys.stderr)
                frontier.done(None)

    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    close()
    return {"pages": frontier.pages, "errors": frontier.errors}


async def run_asyncio(seeds: list[str], ca: str, redis_url: str, conc: int, per_host: int) -> dict:
    import aiohttp
    import redis.asyncio as aredis

    ctx = ssl.create_default_context(cafile=ca)
    connector = aiohttp.TCPConnector(limit=conc, limit_per_host=per_host, ssl=ctx)
    client = aredis.Redis.from_url(redis_url, max_connections=conc)
    script = client.register_script(SCRIPT)
    seen, queue = set(seeds), asyncio.Queue()
    for s in seeds:
        queue.put_nowait(s)
    state = {"pages": 0, "errors": 0}

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            url = await queue.get()
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                    body = await resp.read()
                    headers = dict(resp.headers)
                for link in same_host_links(body, url, headers):
                    if link not in seen:
                        seen.add(link)
                        queue.put_nowait(link)
                for _ in range(ROUND_TRIPS):
                    await script(keys=KEYS, args=[url])
            except Exception as exc:
                state["errors"] += 1
                if state["errors"] == 1:
                    print(f"{url}: {exc!r}", file=sys.stderr)
            state["pages"] += 1
            queue.task_done()

    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(conc)]
        await queue.join()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await client.aclose()
    return state


def main() -> None:
    mode, seeds_file, ca, redis_url, conc, per_host, out = sys.argv[1:8]
    seeds = Path(seeds_file).read_text().split()
    cpu0, t0 = cpu_seconds(), time.monotonic()
    if mode in ("threads", "ours", "hybrid"):
        result = run_threads(seeds, ca, redis_url, int(conc), int(per_host), mode)
    elif mode == "asyncio":
        result = asyncio.run(run_asyncio(seeds, ca, redis_url, int(conc), int(per_host)))
    else:
        sys.exit(f"unknown mode {mode!r}")
    result.update(cpu_s=cpu_seconds() - cpu0, wall_s=time.monotonic() - t0)
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
