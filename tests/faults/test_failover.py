"""The clients a person runs ride out what the workers ride out. A Redis Cluster (3 masters and
3 replicas, every client told of all six nodes) loses the master holding the crawl to SIGKILL
mid-crawl: ``crawler crawl`` keeps watching and exits 0 with the crawl exact, and ``crawler
status``, ``crawler list`` and the dashboard answer throughout. A single Redis frozen for 20 s (SIGSTOP): the
watching command waits, as the workers do, instead of exiting 2.

Each test runs its own Redis or cluster; part of `make test-faults` (CI runs it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests

from crawler_tasks.settings import load
from crawler_tasks.state.connection import connect
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.crawl import Crawl, list_crawls
from crawler_tasks.surface.crawl_command import _has_crawl_workers
from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.faults.test_cluster import master_of
from tests.integration.test_cluster import workers_on
from tests.support.cluster import Cluster
from tests.support.dashboard_server import AUTH, dashboard
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import reachable, running_sites
from tests.support.waiting import wait_until

CRAWLER = str(Path(sys.executable).parent / "crawler")


def crawl_command(env: dict[str, str], site: str, output: Path) -> subprocess.Popen[str]:
    """``crawler crawl`` of ``site``, once the test's workers answer (it starts none)."""
    settings = load(env=env)
    wait_until(lambda: _has_crawl_workers(settings), timeout=60)
    host = site.split("//")[1].split(":")[0]
    args = [CRAWLER, "crawl", "--allow-private-networks", "--rate", f"{host}=40"]
    args += ["--concurrency", "2", "--output", str(output), "--json", site + "/"]
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def the_crawl(state_url: str, broker_url: str, output: Path) -> Crawl:
    """The one crawl the command started, once it has fetched 30 pages."""
    settings = load(env={}, broker_url=broker_url, redis_url=state_url, output_dir=str(output))
    client = connect(state_url)

    def started() -> str | None:
        crawls = list_crawls(client, Keys(settings.key_prefix))
        return crawls[0]["crawl_id"] if crawls and crawls[0]["done"] >= 30 else None

    crawl_id = wait_until(started, timeout=90)
    return Crawl(crawl_id, settings=settings, client=client)


def ask(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CRAWLER, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def cluster6() -> Iterator[Cluster]:
    c = Cluster(masters=3, replicas=1, fsync="everysec")
    yield c
    c.stop()


@pytest.mark.allow_worker_errors(".*")
def test_a_master_sigkilled_mid_crawl_is_ridden_out_by_every_client(
    cluster6, redis_url, tmp_path, worker_logs, monkeypatch
):
    state = cluster6.nodes_url
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_REDIS_URL": state}
    monkeypatch.setenv("CRAWLER_REDIS_URL", state)  # the dashboard's
    with (
        dashboard(redis_url) as base,
        workers_on(redis_url, state, worker_logs),
        running_sites(["127.0.0.41"], 150, 5, delay=0.02) as (graph, servers),
    ):
        proc = crawl_command(env, servers[0].base_url, tmp_path / "out")
        crawl = the_crawl(state, redis_url, tmp_path / "out")
        master = master_of(cluster6, crawl)
        cluster6.caught_up(master)
        master.kill()
        killed, answers = time.monotonic(), []
        while proc.poll() is None and time.monotonic() - killed < 240:
            for args in (("status", crawl.id), ("list",)):
                done = ask(env, *args)
                answers.append((args[0], done.returncode, done.stderr.strip()[-300:]))
            page = requests.get(f"{base}/api/crawls/{crawl.id}", auth=AUTH, timeout=30)
            answers.append(("dashboard", 0 if page.ok else page.status_code, page.text[:300]))
            time.sleep(0.5)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "broker connection lost" not in err
    bad = [a for a in answers if a[1] != 0]
    assert not bad, bad
    assert len(answers) >= 4, answers
    assert json.loads(out)["status"] == "finished"
    seeds = [servers[0].base_url + "/"]
    assert_exact_pages(crawl, reachable_urls(graph, seeds), crawl.summary())


# A broker frozen longer than redis_timeout fails an ack in flight (Celery logs it): the
# message comes back after the visibility timeout and its task finds its URL done.
@pytest.mark.allow_worker_errors("Couldn't ack", "TimeoutError")
def test_a_single_redis_frozen_20s_does_not_end_the_watching_command(tmp_path, worker_logs):
    with private_redis() as url:
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        env = {**os.environ, "CRAWLER_BROKER_URL": url}
        env.pop("CRAWLER_REDIS_URL", None)
        with (
            local_workers(url, url, fetchers=1, parsers=1, log_dir=str(worker_logs)),
            running_sites(["127.0.0.42"], 150, 5, delay=0.02) as (graph, servers),
        ):
            proc = crawl_command(env, servers[0].base_url, tmp_path / "out")
            crawl = the_crawl(url, url, tmp_path / "out")
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(20)
                assert proc.poll() is None, proc.communicate()
            finally:
                os.kill(pid, signal.SIGCONT)
            out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert "state Redis not answering" in err and "answers again after" in err, err
        seeds = [servers[0].base_url + "/"]
        assert_exact_pages(crawl, reachable_urls(graph, seeds), json.loads(out))


def test_local_workers_of_crawl_keep_their_state_where_the_crawl_is(tmp_path):
    """``crawler crawl`` with the crawl state apart from the broker and no worker running:
    the local workers it starts use that state too (they kept it on the broker, where they
    found no crawl, and the crawl never moved)."""
    with (
        private_redis() as broker,
        private_redis() as state,
        running_sites(["127.0.0.43"], 40, 4) as (graph, servers),
    ):
        env = {**os.environ, "CRAWLER_BROKER_URL": broker, "CRAWLER_REDIS_URL": state}
        seed = servers[0].base_url + "/"
        args = [CRAWLER, "crawl", "--allow-private-networks", "--rate", "127.0.0.43=inf"]
        args += ["--output", str(tmp_path / "out"), "--json", seed]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "starting local workers" in done.stderr
    assert json.loads(done.stdout)["counters"]["done"] == len(reachable(graph, [seed]))
