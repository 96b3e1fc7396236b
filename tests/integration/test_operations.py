"""Operating crawls: Flower, events, pause/resume/cancel, graceful shutdown, live display,
Prometheus metrics. Real workers, real Flower, real HTTP on loopback."""

from __future__ import annotations

import math
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import requests

from crawler_tasks import Crawl, start_crawl
from crawler_tasks.surface.embedded import free_port, local_workers, stop_process
from crawler_tasks.web.urls import normalize
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import reachable, running_sites
from tests.support.waiting import wait_until

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow


def _start(settings, server, **options):  # type: ignore[no-untyped-def]
    host = server.base_url.split("//")[1].split(":")[0]
    opts = {"allow_private_networks": True, "rate": math.inf, "concurrency": 2, **options}
    return start_crawl([server.base_url + "/"], settings=settings, **opts), host


def _env(settings) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {**os.environ, "CRAWLER_BROKER_URL": settings.broker_url}


def test_flower_shows_finished_fetch_tasks(settings, workers, tmp_path):
    port = free_port()
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "crawler_tasks",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
        ],
        env={**_env(settings), "FLOWER_UNAUTHENTICATED_API": "true"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api/tasks"
    try:
        wait_until(lambda: _get(api) is not None, timeout=30)
        # Flower's API answers before its event receiver is listening: one-page crawls until
        # Flower shows one (on a loaded machine the main crawl's first task came too early).
        with running_sites(["127.0.0.8"], 1, 0) as (_, (warm,)):

            def listening() -> object:
                _start(settings, warm)[0].wait(timeout=60)
                return _get(api, params={"state": "SUCCESS"})

            wait_until(listening, timeout=90, interval=0.5)
        with running_sites(["127.0.0.7"], 20, 4) as (_, servers):
            crawl, _ = _start(settings, servers[0], concurrency=4)
            crawl.wait(timeout=60)
        site = servers[0].base_url

        def finished(name: str, urls: int) -> dict | None:
            tasks = _get(api, params={"taskname": name, "state": "SUCCESS"}) or {}
            return next(
                (t for t in tasks.values() if (t.get("args") or "").count(site) >= urls), None
            )

        # Flower's event loop runs in its own process: on a loaded machine it shows a task
        # tens of seconds after it ran (34 s seen beside a second test run).
        task = _shown(api, lambda: finished("crawl.fetch", 1))
        assert task["name"] == "crawl.fetch"
        assert crawl.id in task["args"] and len(task["args"]) < 200
        # URLs of the host released together (concurrency 4) went out as one message: one
        # task in Flower, its arguments naming each URL.
        batch = _shown(api, lambda: finished("crawl.fetch_many", 2))
        assert batch["name"] == "crawl.fetch_many"
        assert crawl.id in batch["args"] and batch["args"].count(site) <= 4
    finally:
        stop_process(flower)


def _shown(api: str, found, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    """``found()`` once Flower shows it; else the failure says what Flower did show (tasks by
    name and state, a few arguments): a missing task and a missing event differ there."""
    try:
        return wait_until(found, timeout=timeout)
    except AssertionError as exc:
        tasks = (_get(api) or {}).values()
        kinds = Counter((t.get("name"), t.get("state")) for t in tasks)
        args = [(t.get("name"), (t.get("args") or "")[:160]) for t in list(tasks)[:5]]
        raise AssertionError(
            f"not shown in {timeout:.0f} s; Flower has {dict(kinds)}: {args}"
        ) from exc


def _get(url: str, **kw):  # type: ignore[no-untyped-def]
    try:
        r = requests.get(url, timeout=2, **kw)
        return r.json() if r.ok else None
    except (requests.RequestException, ValueError):
        return None


def test_events_arrive_in_order_with_crawl_finished_last(settings, celery_worker):
    crawl_id = "events-test"
    handle = Crawl(crawl_id, settings=settings)
    seen: list[dict] = []

    def listen() -> None:
        seen.extend(handle.events(timeout=None))

    # Subscribe first: pub/sub delivers only to listeners already connected. The generator
    # subscribes on its first step: wait until Redis counts the subscriber.
    pubsub_thread = threading.Thread(target=listen, daemon=True)
    pubsub_thread.start()
    channel = handle.ck.events
    wait_until(lambda: handle.client.pubsub_numsub(channel)[0][1] >= 1, timeout=10, interval=0.01)
    with running_sites(["127.0.0.8"], 20, 3) as (_, servers):
        crawl, _ = _start(settings, servers[0], crawl_id=crawl_id)
        crawl.wait(timeout=60)
        pubsub_thread.join(10)
    assert not pubsub_thread.is_alive(), "crawl_finished never arrived"
    kinds = [e["event"] for e in seen]
    assert kinds[-1] == "crawl_finished" and kinds.count("crawl_finished") == 1
    finals = [e for e in seen if e["event"] in ("request_completed", "request_failed")]
    assert len(finals) == crawl.summary()["counters"]["done"]
    started = {e["url"]: i for i, e in enumerate(seen) if e["event"] == "request_started"}
    for i, e in enumerate(seen):
        if e["event"] == "request_completed" and e["record"]["url"] in started:
            assert started[e["record"]["url"]] < i


def pause_resume_cancel(crawl, site, host: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """Pause a crawl of ``site`` at 8 req/s, check no request goes out while paused, resume,
    cancel; returns the summary once it is cancelled and checks its records."""
    wait_until(lambda: crawl.progress()["done"] >= 5, timeout=30)
    crawl.pause()
    # What was released before the pause may still complete: wait until nothing of this
    # host is in flight, then 2 s (16 intervals at 8 req/s) without a request.
    wait_until(lambda: crawl.client.zcard(crawl.ck.lease(host)) == 0, timeout=30)
    frozen = len(site.requests())
    time.sleep(2.0)
    assert len(site.requests()) == frozen, "requests continued while paused"
    assert crawl.progress()["status"] == "paused"
    crawl.resume()
    wait_until(lambda: len(site.requests()) > frozen + 3, timeout=15)
    crawl.cancel()
    summary: dict = crawl.wait(timeout=60)  # type: ignore[type-arg]
    assert summary["status"] == "cancelled"
    assert crawl.stats.outstanding() == 0
    records = list(crawl.pages())
    assert Counter(r["url"] for r in records).most_common(1)[0][1] == 1
    # The URLs it dropped are counted, not written: each admitted URL is one or the other.
    cancelled = summary["counters"]["cancelled"]
    assert cancelled and not [r for r in records if r["error"] == "cancelled"]
    assert len(records) + cancelled == summary["counters"]["admitted"]
    return summary


def test_pause_resume_and_cancel(settings, workers):
    with (
        running_sites(["127.0.0.9"], 80, 4) as (_, servers),
        running_sites(["127.0.0.10"], 15, 3) as (g2, other),
    ):
        site = servers[0]
        crawl, host = _start(settings, site, rate=8.0, concurrency=1)
        bystander, _ = _start(settings, other[0], rate=8.0)
        pause_resume_cancel(crawl, site, host)
        bystander_summary = bystander.wait(timeout=60)
    # The other crawl on the same workers went on untouched.
    assert bystander_summary["status"] == "finished"
    expected = {normalize(u) for u in reachable(g2, [other[0].base_url + "/"])}
    assert {r["url"] for r in bystander.pages()} == expected


def test_sigterm_is_a_graceful_shutdown(settings, redis_url, workers, worker_logs):
    with running_sites(["127.0.0.11"], 120, 4, delay=0.02) as (graph, servers):
        crawl, _ = _start(settings, servers[0], rate=30.0)
        wait_until(lambda: crawl.progress()["done"] >= 15, timeout=60)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            assert proc.wait(30) == 0
        assert not crawl.finished
        with local_workers(
            redis_url, redis_url, fetch_threads=4, parsers=1, log_dir=str(worker_logs)
        ):
            summary = crawl.wait(timeout=120)
    assert_exact_pages(crawl, reachable_urls(graph, [servers[0].base_url + "/"]), summary)


def test_watch_shows_live_display_on_a_terminal(settings, workers):
    with running_sites(["127.0.0.12"], 30, 3) as (_, servers):
        crawl, _ = _start(settings, servers[0], rate=15.0)
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawler_tasks.surface.cli",
                "watch",
                crawl.id,
                "--broker",
                settings.broker_url,
            ],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env={**_env(settings), "COLUMNS": "100"},
        )
        os.close(follower)
        screen = _read_until_exit(leader, proc, timeout=60)
    assert proc.returncode == 0
    assert "\x1b[" in screen  # a live terminal display, not plain lines
    assert "finished" in screen and "done" in screen
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawler_tasks.surface.cli",
            "watch",
            crawl.id,
            "--broker",
            settings.broker_url,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(settings),
    )
    assert "\x1b[" not in plain.stdout and f"[{crawl.id}] finished: done=" in plain.stdout


def _read_until_exit(fd: int, proc: subprocess.Popen, timeout: float) -> str:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(10)
    os.close(fd)
    return out.decode(errors="replace")


def test_metrics_export_crawl_counters(settings, celery_worker):
    with running_sites(["127.0.0.13"], 10, 3) as (_, servers):
        crawl, _ = _start(settings, servers[0])
        crawl.wait(timeout=60)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crawler_tasks.surface.cli",
            "metrics",
            "--port",
            str(port),
            "--broker",
            settings.broker_url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        text = wait_until(lambda: _text(f"http://127.0.0.1:{port}/metrics"), timeout=20)
    finally:
        stop_process(proc)
    done = crawl.summary()["counters"]["done"]
    assert f'crawler_done_total{{crawl="{crawl.id}"}} {float(done)}' in text


def _text(url: str) -> str | None:
    try:
        r = requests.get(url, timeout=2)
        return r.text if r.ok else None
    except requests.RequestException:
        return None
