"""Crawl state on a real Redis Cluster (3 masters on loopback, tests/support/cluster.py) under
faults: a SIGKILLed fetch worker, a master killed and restarted, a failover; the page set stays
exact. The same crawls without faults: tests/integration/test_cluster.py."""

from __future__ import annotations

import os
import signal
import time

import pytest

from crawler_tasks.settings import load
from tests.integration.test_cluster import start, workers_on
from tests.support.cluster import Cluster, Node
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import (
    running_sites,
)
from tests.support.waiting import wait_until

# One costly module fixture: the module runs whole on one xdist process (tests/support/scheduling.py).
pytestmark = pytest.mark.one_process

# Redelivery of a dead worker's messages after 4 s instead of 10 minutes (the kill tests).
FAST_REDELIVERY = {"CRAWLER_VISIBILITY_TIMEOUT": "4", "CRAWLER_LEASE_SECONDS": "4"}


def master_of(cluster: Cluster, crawl) -> Node:  # type: ignore[no-untyped-def]
    """The master serving the crawl's hash slot."""
    node = crawl.client.get_node_from_key(crawl.ck.state)
    return next(n for n in cluster.nodes if n.port == int(node.port))


def test_sigkilled_fetch_worker_loses_nothing(csettings, redis_url, cluster_url, worker_logs):
    with (
        workers_on(redis_url, cluster_url, worker_logs, **FAST_REDELIVERY) as procs,
        running_sites(["127.0.0.6"], 150, 5, delay=0.05) as (graph, servers),
    ):
        seeds, crawl = start(csettings, servers, rate=20.0, concurrency=2)
        wait_until(lambda: crawl.progress()["done"] >= 20, timeout=60)
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        assert not crawl.finished
        summary = crawl.wait(timeout=120)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)


@pytest.mark.allow_worker_errors(".*")
def test_master_killed_and_restarted_mid_crawl(
    redis_cluster, csettings, redis_url, cluster_url, worker_logs
):
    """The master holding the crawl is SIGKILLed and started again from its append-only file
    (fsync always): the crawl goes on and ends exact."""
    with (
        workers_on(redis_url, cluster_url, worker_logs),
        running_sites(["127.0.0.7"], 150, 5, delay=0.02) as (graph, servers),
    ):
        seeds, crawl = start(csettings, servers, rate=40.0, concurrency=2)
        wait_until(lambda: crawl.progress()["done"] >= 30, timeout=60)
        node = master_of(redis_cluster, crawl)
        node.kill()
        time.sleep(3)  # beyond cluster-node-timeout: the others mark it failed
        node.start()
        redis_cluster.wait_ok()
        summary = crawl.wait(timeout=180)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)


@pytest.mark.allow_worker_errors(".*")
def test_failover_mid_crawl(redis_url, tmp_path, worker_logs):
    """A replica of the crawl's master takes over (CLUSTER FAILOVER, coordinated: the replica
    has everything the master acknowledged): the crawl goes on and ends exact."""
    cluster = Cluster(masters=3, replicas=1)
    try:
        settings = load(
            env={}, broker_url=redis_url, redis_url=cluster.url, output_dir=str(tmp_path / "out")
        )
        with (
            workers_on(redis_url, cluster.url, worker_logs),
            running_sites(["127.0.0.8"], 150, 5, delay=0.02) as (graph, servers),
        ):
            seeds, crawl = start(settings, servers, rate=40.0, concurrency=2)
            wait_until(lambda: crawl.progress()["done"] >= 30, timeout=60)
            master = master_of(cluster, crawl)
            replica = next(
                n for n in cluster.nodes if n.info("replication").get("master_port") == master.port
            )
            replica.client().execute_command("CLUSTER", "FAILOVER")
            wait_until(lambda: replica.info("replication")["role"] == "master", timeout=30)
            summary = crawl.wait(timeout=180)
        assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    finally:
        cluster.stop()
