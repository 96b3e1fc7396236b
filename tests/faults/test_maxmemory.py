"""A crawl that runs into Redis's ``maxmemory`` (noeviction): real redis-servers of the test's
own, real worker processes, generated sites on loopback. Admission pauses with a clear state
in ``crawler status`` and one WARNING line per process; when memory is raised the crawl
resumes by itself and ends with exactly the reachable pages, each recorded once, and exact
counters (no link counted twice, no page fetched twice): with the broker on the same Redis
(admission stops at 90 % and Redis refuses nothing) and on its own Redis with the line at
100 % (Redis refuses the crawl's writes, admit.lua's among them, and they wait in place).

Also: in-process, a page that waited longer than ``admission_wait`` hands its URL back to the
frontier without spending a retry; a refused pipeline is sent again exactly (only what was
refused); workers restarted while their broker Redis is full wait for room instead of exiting.

The two crawls take 25-35 s each, the restart ~20 s: part of ``make test-faults`` (CI runs it).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import Settings, load
from crawler_tasks.surface.crawl import Crawl
from crawler_tasks.surface.display import line
from crawler_tasks.surface.embedded import local_workers, private_redis
from crawler_tasks.web.urls import normalize
from crawler_tasks.worker.process.app import QUEUES
from crawler_tasks.worker.runtime.room import Room
from tests.support.driver import Driver
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.fault_injection import start_site_crawl
from tests.support.sitegen import Graph, SiteServer, reachable, running_sites
from tests.support.waiting import wait_until

HOSTS = ["127.0.0.91", "127.0.0.92", "127.0.0.93"]
PAGES, LINKS = 1200, 10
SLUG = "-spring-summer-collection-linen-shirt-classic-fit-blue"  # URLs of ~85 characters
PAUSED = "admission paused: Redis out of memory (used "
HOLD = 6.0  # seconds admission stays paused before memory is raised


@contextmanager
def layout(tmp: Path, logs: Path, separate_broker: bool, env: dict[str, str]) -> Iterator[Any]:
    """(state client, settings, site graph, servers) with workers running: two threads-pool
    fetch processes parsing inline, one prefork parse process."""
    with ExitStack() as stack:
        state = stack.enter_context(private_redis())
        broker = stack.enter_context(private_redis()) if separate_broker else state
        env = {"CRAWLER_DISPATCH_INTERVAL": "0.05", **env}
        settings = load(
            env={k: v for k, v in env.items() if k.startswith("CRAWLER_ADMISSION")},
            broker_url=broker,
            redis_url=state if separate_broker else "",
            output_dir=str(tmp / "out"),
        )
        stack.enter_context(
            local_workers(
                broker, state, fetch_threads=8, parsers=1, log_dir=str(logs), extra_env=env
            )
        )
        site = running_sites(HOSTS, PAGES, LINKS, delay=0.02, slug=SLUG)
        graph, servers = stack.enter_context(site)
        client = redis.Redis.from_url(state)
        stack.callback(client.close)
        yield client, settings, graph, servers


def start(settings: Settings, servers: list[SiteServer]) -> Crawl:
    # near_duplicates: a fingerprint index that grows with every page, like the frontier.
    crawl: Crawl = start_site_crawl(settings, *servers, concurrency=4, near_duplicates=True)
    return crawl


def log_lines(logs: Path, text: str) -> Counter[str]:
    """Lines containing ``text``, counted per log file and process (MainProcess, a child)."""
    found: Counter[str] = Counter()
    for path in logs.glob("*.log"):
        for row in path.read_text(errors="replace").splitlines():
            if text in row:
                proc = re.search(r"(MainProcess|ForkPoolWorker-\d+)", row)
                found[f"{path.name}:{proc.group(1) if proc else '?'}"] += 1
    return found


def crawl_into_maxmemory(client: redis.Redis, crawl: Crawl, settings: Settings, logs: Path) -> dict:
    """Once the crawl runs steadily, give Redis a ``maxmemory`` whose admission line is below
    what it uses now (a line of 1: 96 KB above it, which what the crawl adds per page, its
    frontier and the fingerprint index, reaches within seconds). Wait for the pause to show in status and logs, hold it, raise
    memory. Returns the progress seen while paused, with the writes Redis refused."""
    wait_until(lambda: crawl.progress()["done"] >= 300, timeout=60)
    used = int(client.info("memory")["used_memory"])
    fraction = settings.admission_memory_fraction
    # Below 1: Redis already above the admission line, and 7 % below maxmemory, so the pause
    # shows at once, whatever is left of the crawl (a loaded machine may be near its end).
    grow = 0 if fraction < 1 else 96 * 1024
    limit = int((used + grow) / (fraction + (0.03 if fraction < 1 else 0)))
    client.config_resetstat()
    client.config_set("maxmemory", limit)
    try:
        seen = wait_until(
            lambda: (p := crawl.read_progress()).outlook.admission_paused and p, timeout=30
        )
        assert PAUSED in line(seen) and f"of maxmemory {limit / 2**20:.1f} MB)" in line(seen)
        paused = seen.to_json()
        wait_until(lambda: log_lines(logs, PAUSED), timeout=20)
        oom = []  # whether Redis itself refused writes, sampled while admission is held
        for _ in range(int(HOLD / 0.25)):
            time.sleep(0.25)
            oom.append(crawl.progress()["redis_oom"])
        paused["redis_oom_seen"] = any(oom)
        stats = client.info("commandstats").items()
        paused["refused"] = {k: v["rejected_calls"] for k, v in stats if v.get("rejected_calls")}
    finally:
        client.config_set("maxmemory", 0)
    return paused


def assert_exact_links(crawl: Crawl, graph: Graph, servers: list[SiteServer]) -> dict:
    """The exact page set (tests/support/exact.py), and every link of every page counted once:
    discovered = seeds + the links pages recorded."""
    summary = crawl.wait(timeout=180)
    assert_exact_pages(crawl, reachable_urls(graph, [s.base_url + "/" for s in servers]), summary)
    links = sum(len(r.get("outlinks") or []) for r in crawl.pages(latest=False))
    c = summary["counters"]
    assert c["discovered"] == len(servers) + links
    return c


def fetched_twice(servers: list[SiteServer]) -> list[str]:
    seen = Counter((s.base_url, r.path) for s in servers for r in s.requests())
    return [path for (_, path), n in seen.items() if n > 1 and path != "/robots.txt"]


@pytest.mark.timeout(240)
def test_admission_pauses_before_maxmemory_and_resumes(tmp_path, worker_logs):
    """Broker on the same Redis, default settings: admission stops at 90 % of maxmemory, so
    Redis itself never refuses a write (the broker keeps working); raised, the crawl ends
    exact, with no page fetched twice."""
    with layout(tmp_path, worker_logs, separate_broker=False, env={}) as (client, s, graph, sv):
        crawl = start(s, sv)
        paused = crawl_into_maxmemory(client, crawl, s, worker_logs)
        raised = time.monotonic()
        assert_exact_links(crawl, graph, sv)
        print(f"\npaused at done={paused['done']}, finished {time.monotonic() - raised:.1f}s later")
        assert not paused["redis_oom_seen"]
        assert paused["refused"] == {}  # Redis itself refused nothing: the broker worked on
        assert fetched_twice(sv) == []
        wait_until(lambda: log_lines(worker_logs, "admission resumed after"), timeout=20)
    lines = log_lines(worker_logs, PAUSED)
    # One line per process that saw it (a pause that flaps at the line is still one), never
    # one per page or per poll.
    assert lines and max(lines.values()) <= 3, lines


@pytest.mark.timeout(240)
def test_writes_refused_at_maxmemory_wait_in_place(tmp_path, worker_logs):
    """Broker on a Redis of its own (the recommended layout), admission line at 100 %: Redis
    refuses the crawl's writes (admit.lua among them). Workers wait, the status says so, and
    the crawl ends exact once memory is raised."""
    env = {"CRAWLER_ADMISSION_MEMORY_FRACTION": "1"}
    with layout(tmp_path, worker_logs, separate_broker=True, env=env) as (client, s, graph, sv):
        crawl = start(s, sv)
        paused = crawl_into_maxmemory(client, crawl, s, worker_logs)
        assert paused["redis_oom_seen"]
        assert_exact_links(crawl, graph, sv)
        print(f"\npaused at done={paused['done']}; writes refused: {paused['refused']}")
        assert paused["refused"]
        assert fetched_twice(sv) == []


def test_a_page_without_room_goes_back_to_the_frontier(redis_url, client, tmp_path):
    """In-process (tests/support/driver.py): Redis fills while a page is being fetched; after
    ``admission_wait`` the page's URL is handed back (no retry spent, nothing counted), and
    once memory is raised it is fetched again and the crawl ends exact."""
    out = str(tmp_path / "out")
    # Parsed in the fetch task (the recommended layout): the page is only in this process.
    settings = load(
        env={}, broker_url=redis_url, output_dir=out, admission_wait=0.5, inline_parse_bytes=2**18
    )
    driver = Driver(settings)
    driver.ctx.room.every = 0.0  # look at Redis's memory at every question
    try:
        with running_sites(["127.0.0.94"], 6, 3, delay=0.8) as (graph, servers):
            crawl = start_crawl(
                [servers[0].base_url + "/"],
                settings=settings,
                allow_private_networks=True,
                rate=math.inf,
                concurrency=4,
                rates={"127.0.0.94": math.inf},
                obey_robots=False,  # no robots.txt to cache while Redis is full
            )
            assert driver.dispatcher.tick()  # the seed is released
            (_, _, url, depth) = driver.messages.popleft()
            fill = threading.Timer(0.2, client.config_set, ("maxmemory", 1))  # during the fetch
            fill.start()
            try:
                result = driver_fetch(driver, crawl.id, url, depth)
            finally:
                fill.join()
                client.config_set("maxmemory", 0)
            assert result == "retry"
            assert crawl.stats.counters()["discovered"] == 1  # the seed, nothing of the page
            assert client.hget(crawl.ck.for_url(url).attempts, url) is None  # no retry spent
            assert client.zcard(crawl.ck.for_url(url).retry) == 1
            summary = driver.run(crawl, timeout=120)
            assert [r.path for r in servers[0].requests()].count("/") == 2  # fetched again
        records = Counter(r["url"] for r in crawl.pages(latest=False))
        assert set(records) == {normalize(u) for u in reachable(graph, [servers[0].base_url + "/"])}
        assert max(records.values()) == 1
        assert summary["counters"]["done"] == len(records)
    finally:
        driver.close()


def driver_fetch(driver: Driver, crawl_id: str, url: str, depth: int) -> str:
    from crawler_tasks.worker.visit import pipeline

    return pipeline.fetch_url(driver.ctx, crawl_id, url, depth)


@pytest.mark.parametrize("transaction", [False, True])
def test_patient_client_sends_again_only_what_redis_refused(client, transaction):
    """Under OOM a plain pipeline runs its LPOP (which frees memory) and is refused its
    HINCRBY: only the HINCRBY is sent again. A MULTI is refused whole and sent again whole.
    Either way the list loses exactly one element once memory is raised."""
    client.rpush("l", "a", "b", "c")
    room = Room(client, fraction=1.0, patience=1.0)
    patient = room.client_for(client)
    client.config_set("maxmemory", 1)
    raise_memory = threading.Timer(0.5, client.config_set, ("maxmemory", 0))
    raise_memory.start()
    try:
        pipe = patient.pipeline(transaction=transaction)
        pipe.lpop("l")
        pipe.hincrby("h", "n", 1)
        assert pipe.execute() == [b"a", 1]
    finally:
        raise_memory.join()
        client.config_set("maxmemory", 0)
    assert client.lrange("l", 0, -1) == [b"b", b"c"]
    assert client.hget("h", "n") == b"1"


@pytest.mark.timeout(120)
def test_workers_restart_on_a_full_redis_and_serve_once_it_has_room(tmp_path, worker_logs):
    """Workers (re)started while their broker Redis is over maxmemory wait for room instead of
    exiting: connecting, kombu re-adds its queue bindings (SADD, a TTL script), reads queue
    sizes in a MULTI and takes a lock to put back unacknowledged messages, all refused by a
    full Redis; that was an "Unrecoverable error" (a systemd restart loop until room)."""
    start = dict(fetch_threads=4, parsers=1, fetchers=1, log_dir=str(worker_logs))
    with private_redis() as url, running_sites(["127.0.0.95"], 10, 3) as (graph, servers):
        client = redis.Redis.from_url(url)
        with local_workers(url, url, **start):  # their queues are declared once, with room
            # Until kombu has bound every queue (a fixed wait was too short on a busy machine:
            # the next workers then bound them on a full Redis, which this test is not about).
            bound = [f"_kombu.binding.{q}" for q in QUEUES]
            wait_until(lambda: client.exists(*bound) == len(bound), timeout=60)
        client.config_set("maxmemory", 1)
        with local_workers(url, url, **start) as procs:
            time.sleep(8)
            assert [p.poll() for p in procs] == [None, None], "a worker exited"
            client.config_set("maxmemory", 0)
            settings = load(env={}, broker_url=url, output_dir=str(tmp_path / "out"))
            seed = servers[0].base_url + "/"
            crawl = start_crawl(
                [seed], settings=settings, allow_private_networks=True, rate=math.inf
            )
            crawl.wait(timeout=60)
        assert {r["url"] for r in crawl.pages()} == {normalize(u) for u in reachable(graph, [seed])}
        client.close()
    assert not log_lines(worker_logs, "Unrecoverable error")
