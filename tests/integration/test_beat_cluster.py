"""celery beat (RedBeat) with its keys on the crawl-state Redis Cluster (issue 35): a real
3-master cluster (tests/support/cluster.py), the broker a standalone Redis; beat fires a schedule,
its run is exact, and RedBeat's entries and lock live on the cluster, not on the broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redbeat.schedulers import ensure_conf

from crawler_tasks import Crawl
from crawler_tasks.settings import load
from crawler_tasks.state.connection import connect
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.schedules import Schedule, Schedules
from crawler_tasks.surface.embedded import local_workers, stop_process
from crawler_tasks.worker.process.app import make_app
from tests.integration.test_recrawl import due_now
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.processes import stop_together
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


@pytest.mark.timeout(300)
def test_beat_on_the_cluster_fires_a_schedule_whose_run_is_exact(
    redis_cluster, redis_url, worker_logs, tmp_path: Path
):
    redis_cluster.wait_ok()
    redis_cluster.flush()
    state = redis_cluster.url
    settings = load(env={}, broker_url=redis_url, redis_url=state, output_dir=str(tmp_path))
    app = make_app(settings)
    client = connect(state)
    schedules = Schedules(app, client, Keys(settings.key_prefix))
    empty = tmp_path / "schedules.toml"  # beat loads no schedule from a file
    empty.write_text("")
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_REDIS_URL": state}
    env["CRAWLER_SCHEDULES_FILE"] = str(empty)
    with (
        running_sites(["127.0.0.24"], 40, 4, cross_host_ratio=0) as (graph, (server,)),
        local_workers(
            redis_url,
            state,
            fetch_threads=8,
            log_dir=str(worker_logs),
        ) as procs,
        open(worker_logs / "beat.log", "ab") as beat_log,
    ):
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "crawler_tasks", "beat", "--loglevel", "INFO"]
            + ["-s", str(tmp_path / "beat-schedule")],
            env=env,
            stdout=beat_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(lambda: client.exists(ensure_conf(app).lock_key), timeout=60)
            seed = server.base_url + "/"
            host = server.netloc.split(":")[0]
            options = {
                "allow_private_networks": True,
                "allowed_domains": [host],
                "rate": 50.0,
                "output": str(tmp_path / "out"),
            }
            schedules.add(Schedule("site", [seed], every_hours=1, options=options))
            due_now(app, "site")
            (run,) = wait_until(lambda: schedules.runs("site"), timeout=60)
            schedules.remove("site")
            crawl = Crawl(run, settings=settings, client=client)
            summary = crawl.wait(timeout=120)
        finally:
            stop_process(beat)
            stop_together(procs)
    assert_exact_pages(crawl, reachable_urls(graph, [seed]), summary)
    # RedBeat's keys are on the cluster; the broker holds none of them.
    prefix = app.conf.redbeat_key_prefix
    broker = redis.Redis.from_url(redis_url)
    assert not list(broker.scan_iter(f"{prefix}*"))
    assert list(client.scan_iter(f"{prefix}*"))
