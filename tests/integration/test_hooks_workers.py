"""Extraction hooks and on_item tasks with real Celery workers: the user's task in a worker of
its own queue, its failures, and items exactly once when a parse process is SIGKILLed between
writing a page's items and its record and the page is parsed again."""

from __future__ import annotations

import json
import math

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.surface.embedded import FETCH_QUEUES, local_workers, stop_process
from tests.integration.test_claims import fetch_worker
from tests.support.paths import HOOKS
from tests.support.sitegen import _simple_page, serve_hosts
from tests.support.waiting import wait_until

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


SITE = {"/": page("/a", "/b"), "/a": page("/b", "/c"), "/b": page("/"), "/c": page()}


def crawl_site(settings, server, **options):  # type: ignore[no-untyped-def]
    opts = {"allow_private_networks": True, "obey_robots": False, "rate": math.inf}
    return start_crawl([server.base_url + "/"], settings=settings, **{**opts, **options})


def test_on_item_task_in_its_own_queue_gets_every_item(settings, redis_url, worker_logs, tmp_path):  # type: ignore[no-untyped-def]
    received = tmp_path / "items.jsonl"
    env = {"PYTHONPATH": str(HOOKS)}
    with (
        serve_hosts(None, ["127.0.0.150"], extra_routes=SITE) as (server,),
        local_workers(
            redis_url, redis_url, parsers=1, fetchers=1, log_dir=str(worker_logs), extra_env=env
        ),
    ):
        user = fetch_worker(
            redis_url, worker_logs, "items", "--include", "extract_hooks",
            TEST_ITEMS_FILE=str(received), **env,
        )  # fmt: skip
        try:
            crawl = crawl_site(
                settings, server, extract="extract_hooks:two_items", on_item="extract_hooks.store"
            )
            summary = crawl.wait(timeout=60)
            wait_until(lambda: received.exists() and len(received.read_text().splitlines()) >= 4)
        finally:
            stop_process(user)
    calls = [json.loads(line) for line in received.read_text().splitlines()]
    assert sorted(c["url"] for c in calls) == sorted(r["url"] for r in crawl.pages())
    assert {c["crawl_id"] for c in calls} == {crawl.id}
    got = sorted(json.dumps(i, sort_keys=True) for c in calls for i in c["items"])
    on_disk = sorted(json.dumps(x["item"], sort_keys=True) for x in crawl.items())
    assert got == on_disk and len(got) == summary["counters"]["items"] == 8


@pytest.mark.allow_worker_errors("cannot store the items")
def test_an_on_item_task_that_raises_dead_letters_its_page(settings, redis_url, worker_logs):  # type: ignore[no-untyped-def]
    env = {"PYTHONPATH": str(HOOKS)}
    with (
        serve_hosts(None, ["127.0.0.151"], extra_routes=SITE) as (server,),
        local_workers(
            redis_url, redis_url, parsers=1, fetchers=1, log_dir=str(worker_logs), extra_env=env
        ),
    ):
        user = fetch_worker(redis_url, worker_logs, "items", "--include", "extract_hooks", **env)
        try:
            crawl = crawl_site(
                settings, server, extract="extract_hooks:two_items", on_item="extract_hooks.explode"
            )
            crawl.wait(timeout=60)
            dead = wait_until(lambda: len(crawl.failed()) == 4 and crawl.failed())
        finally:
            stop_process(user)
    assert {d["url"] for d in dead} == {r["url"] for r in crawl.pages()}
    assert {d["extract_error"] for d in dead} == {
        f"on_item: RuntimeError: cannot store the items of {d['url']}" for d in dead
    }
    assert all(r["error"] is None and r["items"] == 2 for r in crawl.pages())


def test_secrets_stay_out_of_redis_worker_logs_and_output(settings, redis_url, worker_logs):  # type: ignore[no-untyped-def]
    """Basic auth and a cookie from the workers' environment reach the site; Redis (MONITOR),
    the workers' logs (the fetch worker's at DEBUG) and the output files never see them."""
    from tests.integration.test_request_settings import Monitor, output_text

    auth, cookie = "site-user:worker-secret-pw", "worker-cookie-secret"
    env = {"SITE_AUTH": auth, "SITE_COOKIE": cookie}
    with (
        serve_hosts(None, ["127.0.0.153"], extra_routes=SITE) as (server,),
        local_workers(
            redis_url, redis_url, parsers=1, fetchers=0, log_dir=str(worker_logs), extra_env=env
        ),
    ):
        fetcher = fetch_worker(redis_url, worker_logs, FETCH_QUEUES, "--loglevel", "DEBUG", **env)
        monitor = Monitor(redis_url)
        crawl = crawl_site(
            settings,
            server,
            auth={"127.0.0.153": "env:SITE_AUTH"},
            cookies={"127.0.0.153": {"s": "env:SITE_COOKIE"}},
        )
        crawl.wait(timeout=60)
        redis_text = monitor.stop()
        seen = server.requests()
        stop_process(fetcher)
    assert len(seen) == 4 and all(r.headers["Cookie"] == f"s={cookie}" for r in seen)
    logs = "\n".join(p.read_text(errors="replace") for p in worker_logs.glob("*.log"))
    assert '"GET /a HTTP/1.1" 200' in logs  # the fetch worker's DEBUG log has every request
    assert "env:SITE_AUTH" in redis_text
    for text in (redis_text, logs, output_text(crawl.output_dir)):
        assert "worker-secret-pw" not in text and cookie not in text


def test_an_on_item_task_no_worker_knows_is_refused_and_a_queue_nobody_serves_is_said(
    redis_url, worker_logs, tmp_path
):  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {"PYTHONPATH": str(HOOKS)}

    def crawl(task: str, queue: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", server.base_url + "/",
             "--broker", redis_url, "--allow-private-networks", "--rate", "127.0.0.151=inf",
             "--extract", "extract_hooks:two_items", "--on-item", task, "--on-item-queue", queue,
             "--output", str(tmp_path)],
            capture_output=True, text=True, timeout=120, env={**os.environ, **env},
        )  # fmt: skip

    with (
        serve_hosts(None, ["127.0.0.151"], extra_routes=SITE) as (server,),
        local_workers(
            redis_url, redis_url, parsers=1, fetchers=1, log_dir=str(worker_logs), extra_env=env
        ),
    ):
        user = fetch_worker(redis_url, worker_logs, "items", "--include", "extract_hooks", **env)
        try:
            wait_until(lambda: "items" in _queues(redis_url), timeout=30)
            unknown = crawl("extract_hooks.nope", "items")
            unserved = crawl("extract_hooks.store", "nobody-serves-this")
        finally:
            stop_process(user)
    assert unknown.returncode == 2
    (line,) = unknown.stderr.strip().splitlines()
    assert "no worker of queue 'items' knows this task" in line
    assert unserved.returncode == 0, unserved.stderr
    assert "no worker consumes queue 'nobody-serves-this'" in unserved.stderr
    crawl_id = unserved.stderr.split("crawl ", 1)[1].split()[0]
    shown = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "status", crawl_id, "--broker",
         redis_url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "on_item: 4 batches waiting in queue 'nobody-serves-this'" in shown.stdout, shown


def _queues(redis_url: str) -> set[str]:
    from crawler_tasks.settings import load
    from crawler_tasks.worker.process.app import make_app

    replies = make_app(load(env={}, broker_url=redis_url)).control.inspect(timeout=1.0)
    return {q["name"] for qs in (replies.active_queues() or {}).values() for q in qs}
