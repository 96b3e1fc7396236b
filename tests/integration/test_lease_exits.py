"""One exit for a lease: whatever becomes of a released URL, done.lua runs exactly once for
each lease release.lua took (issue 30). A second run is not harmless even when the lease is
already gone: "ok" eases the host's slow-down by 20 % and clears its circuit breaker, for a
request that was never sent (a robots-refused URL's lease was refunded, then released "ok").

Every done.lua run is read from Redis itself (MONITOR: each EVALSHA of done.lua's sha with its
URL and event), while the real dispatcher and pipeline run in process (tests/support/driver.py)
against real local servers, the render paths with the real headless Chromium. A lease is a release
of the URL: every release is published as a fetch (the driver records it). The paths: a response
(ok, 5xx, 429, rendered), a render that failed, a host that is down, a URL robots.txt refuses
(disallowed, unreachable), a cancelled URL, a URL taken back, a sitemap file, pages not due.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.surface.crawl import Crawl
from crawler_tasks.worker.dispatch.lost import BEAT_MARGIN
from tests.support.driver import Driver
from tests.support.sitegen import Handler, SiteServer, free_port

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HOST = "127.0.0.49"
END = "lease-exits-end"


class DoneRuns:
    """(url, event) of every done.lua run, read with MONITOR on its own connection, and every
    command in the order Redis ran them."""

    def __init__(self, redis_url: str, done: Any) -> None:
        self.client = redis.Redis.from_url(redis_url)
        # Loaded first: MONITOR also shows an EVALSHA that Redis refused (NOSCRIPT) before
        # redis-py loaded the script and ran it.
        self.sha = self.client.script_load(done.script)
        self.runs: list[tuple[str, str]] = []
        self.commands: list[str] = []
        #: URL -> the index in ``commands`` of its first done.lua run.
        self.done_at: dict[str, int] = {}
        self._monitor = self.client.monitor()
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            command = self._monitor.next_command()["command"]
            words = command.split(" ")
            if words[:2] == ["ECHO", END]:
                return
            self.commands.append(command)
            if words[:2] == ["EVALSHA", self.sha] and words[2] == "4":
                url, _domain, event = words[7:10]
                if event != "extra":  # robots.txt's own request: not a lease
                    self.runs.append((url, event))
                    self.done_at.setdefault(url, len(self.commands) - 1)

    def stop(self) -> Counter[str]:
        """done.lua runs per URL, everything sent so far read."""
        self.client.execute_command("ECHO", END)  # through another connection than MONITOR's
        self._thread.join(10)
        self._monitor.__exit__()
        return Counter(url for url, _ in self.runs)

    def after(self, first: int, *texts: str) -> bool:
        """Was every command naming one of ``texts`` sent after ``commands[first]`` (a URL's
        done.lua run: ``done_at``)? False too if none named them."""
        named = [i for i, c in enumerate(self.commands) if any(t in c for t in texts)]
        return bool(named) and min(named) > first


@pytest.fixture
def done_runs(redis_url: str, driver: Driver) -> Iterator[Callable[[], DoneRuns]]:
    started: list[DoneRuns] = []

    def start() -> DoneRuns:
        started.append(DoneRuns(redis_url, driver.ctx.r.scripts.done))
        return started[-1]

    yield start
    for runs in started:
        if runs._thread.is_alive():
            runs.stop()


def send(status: int, body: bytes = b"x", **headers: str) -> Callable[[Handler], None]:
    return lambda h: h.send_body(status, body, "text/plain", headers or None)


def html(body: str) -> Callable[[Handler], None]:
    return lambda h: h.send_body(200, f"<html><body>{body}</body></html>".encode())


#: One request at a time, no retries: each lease is one URL's one attempt.
CRAWL = {
    "allow_private_networks": True,
    "obey_robots": False,
    "rate": math.inf,
    "concurrency": 1,
    "max_retries": 0,
}


def crawl_of(settings: Any, seed: str, **options: Any) -> Crawl:
    return start_crawl([seed], settings=settings, **{**CRAWL, **options})


def once_per_lease(driver: Driver, runs: DoneRuns, crawl: Crawl) -> dict[str, Any]:
    """done.lua ran once for each release of each URL; the URLs' records."""
    per_url = runs.stop()
    leases = Counter(url for cid, url, _, _ in driver.published if cid == crawl.id)
    assert leases, "nothing was released: the test checked nothing"
    assert per_url == leases, (per_url, leases, runs.runs)
    return {r["url"]: r for r in crawl.pages(latest=False)}


# (path, route, options, expected error of the URL, expected done.lua events)
SIMPLE = [
    ("ok", send(200), {}, None, ["ok"]),
    ("error", send(500), {}, "server_error", ["error"]),
    ("throttle", send(429, **{"Retry-After": "1"}), {}, "server_error", ["throttle"]),
    ("rendered", html("<p>rendered</p>"), {"render": "always"}, None, ["ok"]),
]


@pytest.mark.parametrize(("path", "route", "options", "error", "events"), SIMPLE)
def test_one_done_per_lease_for_a_response(
    settings, driver, done_runs, path, route, options, error, events
):  # type: ignore[no-untyped-def]
    with SiteServer(address=HOST, extra_routes={"/p": route}) as site:
        crawl = crawl_of(settings, site.base_url + "/p", **options)
        runs = done_runs()
        driver.run(crawl, timeout=90)
    records = once_per_lease(driver, runs, crawl)
    [record] = records.values()
    assert record["error"] == error, record
    assert [e for _, e in runs.runs] == events
    if path == "rendered":
        assert record["rendered"] is True


def test_one_done_per_lease_for_a_render_that_failed(settings, redis_url):  # type: ignore[no-untyped-def]
    """A render that hangs is retried (its render published again, no lease), then failed."""
    driver = Driver(dataclasses.replace(settings, render_deadline=2.0, render_settle=0.5))
    loop = html("<script>while (true) {}</script>")
    try:
        with SiteServer(address=HOST, extra_routes={"/p": loop}) as site:
            crawl = crawl_of(settings, site.base_url + "/p", render="always", max_retries=1)
            runs = DoneRuns(redis_url, driver.ctx.r.scripts.done)
            driver.run(crawl, timeout=90)
        records = once_per_lease(driver, runs, crawl)
    finally:
        driver.close()
    [record] = records.values()
    assert record["error"] == "render_failed" and record["attempts"] == 2, record
    assert [task for task, _, _ in driver.results].count("render") == 2
    assert [e for _, e in runs.runs] == ["ok"]


def test_one_done_per_lease_for_a_host_that_is_down(settings, driver, done_runs):  # type: ignore[no-untyped-def]
    crawl = crawl_of(settings, f"http://{HOST}:{free_port(HOST)}/p")  # nobody listens
    runs = done_runs()
    driver.run(crawl, timeout=60)
    [record] = once_per_lease(driver, runs, crawl).values()
    assert record["error"] == "connection_error", record
    assert [e for _, e in runs.runs] == ["down"]


@pytest.mark.parametrize("unreachable", [False, True])
def test_a_robots_refused_url_ends_its_lease_once_and_leaves_the_host_alone(
    settings, driver, done_runs, unreachable
):  # type: ignore[no-untyped-def]
    """Refunded, once: the host's slow-down and circuit breaker are as they were (a second
    release as "ok" eased the one and cleared the other, for a request never sent)."""
    robots = send(503) if unreachable else send(200, b"User-agent: *\nDisallow: /p\n")
    with SiteServer(address=HOST, extra_routes={"/robots.txt": robots, "/p": send(200)}) as site:
        crawl = crawl_of(settings, site.base_url + "/p", obey_robots=True)
        host = crawl.ck.domain(HOST)
        before = {"slow": "2.0", "fails": "1", "down_since": f"{time.time():.6f}"}
        crawl.client.hset(host, mapping=before)  # slowed, one connection failure counted
        runs = done_runs()
        summary = driver.run(crawl, timeout=60)
    once_per_lease(driver, runs, crawl)
    assert [e for _, e in runs.runs] == ["refund"]
    state = {k.decode(): v.decode() for k, v in crawl.client.hgetall(host).items()}
    assert {k: state.get(k) for k in before} == before
    counter = "robots_unreachable" if unreachable else "robots_disallowed"
    assert summary["counters"][counter] == 1
    assert [path for path in site.requests() if path.path == "/p"] == []


def test_one_done_per_lease_for_a_cancelled_url(settings, driver, done_runs):  # type: ignore[no-untyped-def]
    """Released, then its crawl cancelled before its fetch started."""
    with SiteServer(address=HOST, extra_routes={"/p": send(200)}) as site:
        crawl = crawl_of(settings, site.base_url + "/p")
        runs = done_runs()
        assert driver.dispatcher.tick()  # released and published, not fetched yet
        crawl.cancel()
        driver.run(crawl, timeout=60)
        assert site.requests() == []
    # Counted cancelled, without a line in the output (as the URLs cancel.lua counts).
    assert once_per_lease(driver, runs, crawl) == {}
    assert crawl.summary()["counters"]["cancelled"] == 1


def test_one_done_per_lease_for_a_url_taken_back(settings, redis_url):  # type: ignore[no-untyped-def]
    """Released, its message lost: taken back (its lease returned as an error), released
    again and fetched: two leases, two done.lua runs."""
    driver = Driver(dataclasses.replace(settings, lost_message_seconds=0.1))
    try:
        with SiteServer(address=HOST, extra_routes={"/p": send(200)}) as site:
            crawl = crawl_of(settings, site.base_url + "/p", max_retries=1)
            runs = DoneRuns(redis_url, driver.ctx.r.scripts.done)
            assert driver.dispatcher.tick()
            driver.messages.clear()  # the message went down with a worker
            time.sleep(1.1)  # released_at has a resolution of a second
            # Lost for sure once every living process (this one) beat again without it.
            assert driver.dispatcher.reclaim() == 0
            # A beat counts as "again" only BEAT_MARGIN after the message was first seen
            # missing (a held set is written a moment before the beat's time).
            time.sleep(BEAT_MARGIN + 0.1)
            driver.ctx.heartbeat.beat()
            assert driver.dispatcher.reclaim() == 1
            driver.run(crawl, timeout=60)
        records = once_per_lease(driver, runs, crawl)
    finally:
        driver.close()
    [record] = records.values()
    assert record["error"] is None and record["status"] == 200, record
    assert [e for _, e in runs.runs] == ["error", "ok"]


@pytest.mark.parametrize("seed", ["/p", "/map.xml"])
def test_one_done_per_lease_for_a_sitemap_file(settings, redis_url, driver, done_runs, seed):  # type: ignore[no-untyped-def]
    """A sitemap file (``sitemaps``): requested under its own lease, what it lists admitted
    once that lease is back (sitemap_seeds.used); the page whose robots.txt named it
    admitted it after its own lease (sitemap_seeds.discover). A seed its own robots.txt names
    is a sitemap file too, though it is marked one only after its lease."""

    def robots(h: Handler) -> None:
        h.send_body(200, f"Sitemap: {h.site.base_url}/map.xml\n".encode(), "text/plain")

    def sitemap(h: Handler) -> None:
        locs = f"<url><loc>{h.site.base_url}/q</loc></url>"
        xml = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
        h.send_body(200, xml.encode(), "application/xml")

    marker = redis.Redis.from_url(redis_url)

    def page(h: Handler) -> None:  # in the commands Redis ran, where the page was requested
        marker.execute_command("ECHO", "requested /p")
        h.send_body(200, b"x", "text/plain")

    routes = {"/robots.txt": robots, "/map.xml": sitemap, "/p": page, "/q": send(200)}
    with SiteServer(address=HOST, extra_routes=routes) as site:
        crawl = crawl_of(settings, site.base_url + seed, sitemaps=True)
        runs = done_runs()
        summary = driver.run(crawl, timeout=60)
    marker.close()
    records = once_per_lease(driver, runs, crawl)
    base = site.base_url
    assert set(records) == {base + p for p in {seed, "/map.xml", "/q"}}
    assert records[base + "/map.xml"]["sitemap"]["kind"] == "urlset"
    assert [e for _, e in runs.runs] == ["ok"] * len(records)
    # What each step found is written by settle: the sitemap's URLs once its lease is back;
    # the sitemaps robots.txt named, after the page's request (with its response's records,
    # the lease returned with its finish: settle._responded), not before it.
    assert runs.after(runs.done_at[base + "/map.xml"], base + "/q")
    if seed == "/p":
        requested = runs.commands.index("ECHO requested /p")
        sitemaps = crawl.ck.for_url(base + "/map.xml").sitemaps
        assert runs.after(requested, f"SADD {sitemaps} {base}/map.xml")
    assert summary["counters"]["sitemap_files"] == 1 and summary["counters"]["sitemaps"] == 1


def run_at(settings: Any, client: redis.Redis, seed: str, at: float) -> Crawl:
    """A run of an adaptive schedule whose time is ``at`` (tests/recrawl_site.py's clock)."""
    from crawler_tasks.state import store as stores
    from crawler_tasks.state.store import RedisHandle
    from crawler_tasks.surface.crawl import plan

    adaptive = {"schedule": "exits", "adaptive": True, "min_interval": 3600.0}
    opts = plan([seed], settings, output=settings.output_dir, **CRAWL, **adaptive)
    store = stores.start(RedisHandle.connect(client, settings.key_prefix), opts, at=at)
    return Crawl(store.id, settings=settings, client=client, store=store)


def test_one_done_per_lease_for_pages_not_due(settings, client, driver, done_runs):  # type: ignore[no-untyped-def]
    """An adaptive schedule's pages not due: refunded, once each (no request was sent), the
    links of the last visit admitted once that lease is back (adaptive.skipped)."""
    routes = {"/p": html('<a href="/q">q</a>'), "/q": send(200)}
    with SiteServer(address=HOST, extra_routes=routes) as site:
        driver.run(run_at(settings, client, site.base_url + "/p", 1_700_000_000.0), timeout=60)
        fetched = len(site.requests())
        second = run_at(settings, client, site.base_url + "/p", 1_700_000_060.0)
        runs = done_runs()
        driver.run(second, timeout=60)
        assert len(site.requests()) == fetched == 2  # nothing requested by the second run
    records = once_per_lease(driver, runs, second)
    p, q = site.base_url + "/p", site.base_url + "/q"
    assert set(records) == {p, q}
    assert all(r["not_due"] for r in records.values()), records
    assert [e for _, e in runs.runs] == ["refund", "refund"]
    # Its validators (seen by this run) and its last links written once its lease is back.
    validators = second.store.r.keys.schedule_validators("exits")
    assert runs.after(runs.done_at[p], f"HSET {validators} {p}", q)
