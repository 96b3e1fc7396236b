"""Issue 31's "no false deaths" on a Redis Cluster: the crawl state on a real 3-master cluster
(tests/support/cluster.py), the broker the session's standalone Redis, the worker processes of
tests/faults/test_faults.py (dead after 4 s). As tests/faults/test_overload.py on a single Redis:

* a fetch process frozen just past the dead threshold: its URLs are taken back, none spends
  a retry, nothing fails ``worker_lost``, the page set is exact;
* every cluster node, the broker, every worker process and the watching ``crawler crawl``
  frozen together for 20 s (a paused VM), the worker processes resumed 1 s apart (as a busy
  machine gives them the CPU back): nothing taken back, both fetch processes still hold
  their hosts, the page set exact, the command exits 0. The nodes come back with their
  cluster-node-timeout (2 s) long past: the test prints what each node logged of it and
  their roles and epochs (no replicas here, so no failover; with 3 replicas, tried twice,
  none happened either, nor any FAIL: the nodes resume within a millisecond of each other).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from crawler_tasks.settings import load
from crawler_tasks.surface.crawl_command import _has_crawl_workers
from tests.faults.test_failover import CRAWLER, the_crawl
from tests.faults.test_faults import cluster, site
from tests.faults.test_overload import (
    assert_no_retry_spent,
    freeze,
    frozen_past_the_dead_threshold,
    took_back,
)
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.waiting import wait_until

# One costly module fixture: the module runs whole on one xdist process (tests/support/scheduling.py).
pytestmark = pytest.mark.one_process

#: Seconds between two worker processes' SIGCONT after the pause: the first resumed reads the
#: others' heartbeats before they could beat again (well under the dead threshold, 4 s).
RESUME_GAP = 1.0
#: What a node logs when it judges another (or the cluster) failed, or fails over.
NODE_EVENTS = re.compile(r"FAIL|Cluster state changed|[Ff]ailover|Marking node")


@pytest.mark.allow_worker_errors(".*")
def test_fetch_process_frozen_past_the_dead_threshold(  # type: ignore[no-untyped-def]
    csettings, redis_url, cluster_url, tmp_path
):
    frozen_past_the_dead_threshold(csettings, redis_url, tmp_path, CRAWLER_REDIS_URL=cluster_url)


def watch_command(env: dict[str, str], servers, output: Path) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    """``crawler crawl`` of the site as test_faults.start crawls it, once the test's workers
    answer (otherwise it starts local workers of its own)."""
    wait_until(lambda: _has_crawl_workers(load(env=env)), timeout=60)
    args = [CRAWLER, "crawl", "--allow-private-networks", "--concurrency", "4"]
    for server in servers:
        args += ["--rate", f"{server.address}=inf", "--allowed-domain", server.address]
    args += ["--output", str(output), "--json", *(s.base_url + "/" for s in servers)]
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def node_events(redis_cluster, since: dict[int, int]) -> list[str]:  # type: ignore[no-untyped-def]
    """What each node logged of failure detection after the offsets in ``since``."""
    out = []
    for node in redis_cluster.nodes:
        text = (node.dir / "redis.log").read_bytes()[since.get(node.port, 0) :]
        lines = text.decode(errors="replace").splitlines()
        out += [f"{node.port}: {line}" for line in lines if NODE_EVENTS.search(line)]
    return out


def cluster_view(redis_cluster) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """Each node's role, epoch and FAIL messages sent (a failover or a node judged failed
    changes them)."""
    out = {}
    for node in redis_cluster.nodes:
        c = node.client()
        try:
            info = c.execute_command("CLUSTER", "INFO")
        finally:
            c.close()
        text = info.decode() if isinstance(info, bytes) else str(info)
        fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
        role = node.info("replication")["role"]
        out[node.port] = (
            f"{role} epoch {fields.get('cluster_current_epoch')}"
            f" fail sent {fields.get('cluster_stats_messages_fail_sent', 0)}"
        )
    return out


def test_whole_machine_pause(redis_cluster, cluster_url, redis_url, client, tmp_path):  # type: ignore[no-untyped-def]
    """SIGSTOP every cluster node, the broker, every worker process and the watching command
    together for 20 s, then SIGCONT all: nothing taken back, the page set exact, no retry
    spent, the command exits 0."""
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_REDIS_URL": cluster_url}
    out = tmp_path / "out"
    with (
        site(delay=0.05) as (graph, servers),
        cluster(redis_url, tmp_path, CRAWLER_REDIS_URL=cluster_url) as c,
    ):
        c.start_layout()
        proc = watch_command(env, servers, out)
        try:
            crawl = the_crawl(cluster_url, redis_url, out)
            wait_until(lambda: crawl.progress()["done"] > 40, timeout=60)
            pids = [n.proc.pid for n in redis_cluster.nodes]
            pids += [int(client.info("server")["process_id"]), proc.pid]
            logged = {n.port: (n.dir / "redis.log").stat().st_size for n in redis_cluster.nodes}
            names = list(c.procs)
            before = cluster_view(redis_cluster)
            holders = crawl.client.smembers(crawl.keys.fetchers)
            print(f"frozen at {crawl.progress()['done']} pages done")
            freeze(c, names, signal.SIGSTOP)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(20)
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
                for name in names:  # unevenly, as a busy machine gives them the CPU back
                    c.signal(name, signal.SIGCONT)
                    time.sleep(RESUME_GAP)
            stdout, stderr = proc.communicate(timeout=180)
            # Nobody judged dead: both fetch processes still hold hosts (host affinity).
            held_after = crawl.client.smembers(crawl.keys.fetchers)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        taken = took_back(tmp_path / "logs")
    after = cluster_view(redis_cluster)
    print("nodes before -> after:", {p: f"{before[p]} -> {after[p]}" for p in before})
    events = node_events(redis_cluster, logged)
    print(f"{len(events)} failure-detection lines in the node logs after the pause:")
    print("\n".join(events[:30]))
    assert proc.returncode == 0, stderr[-3000:]
    summary = json.loads(stdout)
    assert not taken, taken[:3]
    assert held_after == holders and len(holders) == 2, (holders, held_after)
    assert_exact_pages(crawl, reachable_urls(graph, [s.base_url + "/" for s in servers]), summary)
    assert_no_retry_spent(crawl, summary)
