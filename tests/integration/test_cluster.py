"""Crawl state on a real Redis Cluster (3 masters on loopback, tests/support/cluster.py) with the
broker apart: a standalone Redis (the session's ``redis_url``) or RabbitMQ. The same end-to-end
checks as the single-Redis suite: exact page set and counters, politeness windows with two fetch
processes, pause/resume/cancel, a SIGKILLed fetch worker, a master killed and restarted, a
failover, RabbitMQ as the broker."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.errors import ConfigError
from crawler_tasks.settings import Settings, load
from crawler_tasks.state import connection
from crawler_tasks.surface.embedded import local_workers
from tests.integration.test_operations import pause_resume_cancel
from tests.integration.test_state_sockets import kernel_timeouts
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.fault_injection import rabbitmq_vhost
from tests.support.processes import stop_together
from tests.support.sitegen import (
    PACE_WINDOW,
    max_concurrency,
    rate_report,
    reachable,
    running_sites,
)

# One costly module fixture: the module runs whole on one xdist process (tests/support/scheduling.py).
pytestmark = pytest.mark.one_process

QUIET_SITE = {"broken_ratio": 0, "non_html_ratio": 0, "cross_host_ratio": 0}


@contextlib.contextmanager
def workers_on(broker: str, state: str, log_dir: Path, **env: str) -> Iterator[list]:
    """Two threads-pool fetch processes and a parse process, state on ``state``."""
    with local_workers(
        broker,
        state,
        fetch_threads=8,
        parsers=1,
        fetchers=2,
        log_dir=str(log_dir),
        extra_env=env,
    ) as procs:
        try:
            yield procs
        finally:
            stop_together(procs)


def start(settings: Settings, servers, **options):  # type: ignore[no-untyped-def]
    seeds = [s.base_url + "/" for s in servers]
    hosts = [s.base_url.split("//")[1].split(":")[0] for s in servers]
    opts = {"allow_private_networks": True, "allowed_domains": hosts, **options}
    return seeds, start_crawl(seeds, settings=settings, **opts)


def test_crawl_on_a_cluster_is_exact_and_spreads_over_the_masters(
    csettings, redis_url, cluster_url, worker_logs
):
    hosts = [f"127.0.0.{i}" for i in range(20, 32)]
    with (
        workers_on(redis_url, cluster_url, worker_logs),
        running_sites(hosts, 15, 5, cross_host_ratio=0.3) as (graph, servers),
    ):
        seeds, crawl = start(csettings, servers, rate=math.inf, concurrency=4)
        summary = crawl.wait(timeout=180)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert summary["status_codes"]["404"] >= 1
    assert (crawl.output_dir / "summary.json").exists()
    # 12 partitions, 4 on each master (their hash tags are chosen so); the keys the crawl
    # wrote are on every master.
    assert crawl.options.partitions == 12
    client = crawl.client
    placed = Counter(client.get_node_from_key(pk.flow).name for pk in crawl.ck.parts)
    assert sorted(placed.values()) == [4, 4, 4], placed
    keys = [k for pattern in crawl.ck.patterns for k in client.scan_iter(match=pattern)]
    masters = {client.get_node_from_key(k).name for k in keys}
    print(f"{len(keys)} keys of one crawl on {len(masters)} masters")
    assert len(masters) == 3, masters


def test_the_state_clients_cluster_connections_block_in_the_kernel(cluster_url):
    """Every node's connections of the state client are state/sockets.py's: no Python-level
    timeout (no poll before each send and recv), the kernel's instead."""
    client = connection.connect(cluster_url, pool_size=4, socket_timeout=2.5)
    for n in range(30):  # keys on every master
        client.set(f"sockets-{n}", n)
    for node in client.get_primaries():
        pool = node.redis_connection.connection_pool
        conn = pool.get_connection()
        try:
            assert conn._sock.gettimeout() is None
            assert kernel_timeouts(conn._sock) == ((2, 500_000), (2, 500_000))
        finally:
            pool.release(conn)
    client.close()


def test_a_cluster_is_refused_as_the_broker(cluster_url, tmp_path):
    settings = load(env={}, broker_url=cluster_url, output_dir=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="CRAWLER_BROKER_URL"):
        start_crawl(["http://127.0.0.2/"], settings=settings, allow_private_networks=True)
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "crawler"),
            "crawl",
            "--allow-private-networks",
            "http://127.0.0.2/",
        ],
        env={**os.environ, "CRAWLER_BROKER_URL": cluster_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and "CRAWLER_BROKER_URL" in result.stderr


def test_two_fetch_processes_keep_every_host_within_its_bucket(
    csettings, redis_url, cluster_url, worker_logs
):
    with (
        workers_on(redis_url, cluster_url, worker_logs),
        running_sites(["127.0.0.2", "127.0.0.3", "127.0.0.4"], 16, 4, **QUIET_SITE) as (
            graph,
            servers,
        ),
    ):
        _, crawl = start(csettings, servers, rate=2.0, burst=1, concurrency=1)
        crawl.wait(timeout=60)
        logs = {s.address: s.requests() for s in servers}
    assert {r["url"] for r in crawl.pages()} == set(reachable(graph, graph.roots()))
    for host, log in logs.items():
        report = rate_report(log, window=PACE_WINDOW)
        assert report["count"] == 17, (host, report)  # robots.txt + 16 pages
        assert report["max_in_window"] <= 2 + 1, (host, report)
        assert max_concurrency(log) == 1, host


def test_pause_resume_and_cancel(csettings, redis_url, cluster_url, worker_logs):
    with (
        workers_on(redis_url, cluster_url, worker_logs),
        running_sites(["127.0.0.9"], 80, 4) as (_, servers),
    ):
        _, crawl = start(csettings, servers, rate=8.0, concurrency=1)
        pause_resume_cancel(crawl, servers[0], servers[0].address)


def test_rabbitmq_broker_with_state_on_the_cluster(cluster_url, tmp_path, worker_logs):
    with (
        rabbitmq_vhost() as amqp,
        workers_on(amqp, cluster_url, worker_logs),
        running_sites(["127.0.0.5"], 60, 5) as (graph, servers),
    ):
        settings = load(
            env={}, broker_url=amqp, redis_url=cluster_url, output_dir=str(tmp_path / "out")
        )
        seeds, crawl = start(settings, servers, rate=math.inf, concurrency=4)
        summary = crawl.wait(timeout=120)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
