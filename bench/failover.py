"""What uncoordinated master losses cost a crawl on a Redis Cluster (issue 33).

A cluster of 3 masters + 3 replicas on loopback (AOF everysec, cluster-node-timeout 2 s, as
a cluster is usually run) holds the crawl state; the broker is a standalone Redis apart; two
fetch processes and a parse process, every client told of all six nodes. A crawl of a
``--pages`` site runs; at evenly spaced points of it one master after another is SIGKILLed
(``--kills``, default 3), each once its replica has caught up with it, while the crawl keeps
writing: what the master acknowledged after that point and before its death is what an
asynchronous replica can lose. The killed node is started again from its append-only file
(it rejoins as its successor's replica) before the next kill.

Printed per run: pages expected (reachable), recorded, lost (never recorded), duplicate
records (a URL's page line written twice), duplicate GETs (the server's log), the final
``done`` counter against the records, the crawl's status and how long it took.
``--rounds N`` repeats the whole run."""

from __future__ import annotations

import math
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _util

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from crawler_tasks.web.urls import normalize
from crawler_tasks.worker.process.outage import REDIS_UNAVAILABLE
from tests.support.cluster import Cluster
from tests.support.sitegen import reachable, running_sites


def patiently(call: Any, patience: float = 120.0) -> Any:
    """``call()``, again while the cluster fails over (this script's own reads)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return call()
        except REDIS_UNAVAILABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def master_of_crawl(cluster: Cluster, crawl: Any) -> Any:
    node = crawl.client.get_node_from_key(crawl.ck.state)
    return next(n for n in cluster.nodes if n.port == int(node.port))


def kill_masters(args: Any, cluster: Cluster, crawl: Any, pages: int) -> list[dict[str, Any]]:
    """SIGKILL ``args.kills`` masters one after another (the crawl's own first), each once
    its replica caught up; each killed node is restarted before the next kill."""
    kills = []
    for i in range(args.kills):
        at = pages * (i + 1) // (args.kills + 1)
        while patiently(lambda at=at: crawl.progress()["done"] < at and not crawl.finished):
            time.sleep(0.05)
        if patiently(lambda: crawl.finished):
            break
        masters = sorted(cluster.masters(), key=lambda n: n.port)
        victim = master_of_crawl(cluster, crawl) if i == 0 else masters[i % len(masters)]
        cluster.caught_up(victim)
        victim.kill()
        killed = time.monotonic()
        _util.log(args, f"killed master {victim.address} at done >= {at}")
        time.sleep(3)  # beyond cluster-node-timeout: its replica is elected
        cluster.wait_ok(60)
        took = time.monotonic() - killed
        victim.start()  # rejoins as the new master's replica
        cluster.wait_ok(60)
        kills.append({"kill": i + 1, "node": victim.address, "at_done": at, "ok_after_s": took})
    return kills


def one_run(args: Any, broker: str, cluster: Cluster, out: Path, run: int) -> dict[str, Any]:
    state = cluster.nodes_url
    settings = load(env={}, broker_url=broker, redis_url=state, output_dir=str(out))
    host = f"127.0.0.{60 + run}"
    with (
        running_sites([host], args.pages, 5, delay=0.01) as (graph, servers),
        local_workers(
            broker,
            state,
            fetchers=2,
            fetch_threads=8,
            parsers=1,
            extra_env={"CRAWLER_OUTPUT_DIR": str(out)},
        ),
    ):
        seeds = [servers[0].base_url + "/"]
        expected = {normalize(u) for u in reachable(graph, seeds)}
        begun = time.monotonic()
        crawl = start_crawl(
            seeds, settings=settings, allow_private_networks=True, rate=args.rate, concurrency=4
        )
        kills = kill_masters(args, cluster, crawl, len(expected))
        try:
            summary = patiently(lambda: crawl.wait(timeout=args.timeout))
            status = summary["status"]
        except TimeoutError:
            summary, status = {"counters": patiently(crawl.progress)}, "unfinished"
        took = time.monotonic() - begun
        gets = Counter(r.path for r in servers[0].requests() if r.path != "/robots.txt")
    records = Counter(r["url"] for r in patiently(lambda: list(crawl.pages(latest=False))))
    counters = summary["counters"]
    return {
        "run": run,
        "kills": len(kills),
        "expected": len(expected),
        "recorded": len(records),
        "lost": len(expected - set(records)),
        "dup_records": sum(n - 1 for n in records.values()),
        "dup_gets": sum(n - 1 for n in gets.values()),
        "done": counters.get("done", 0),
        "done_minus_records": counters.get("done", 0) - len(records),
        "status": status,
        "seconds": took,
        "kill_log": kills,
    }


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--rate", type=float, default=30.0, help="requests/s to the site")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    rows = []
    with private_redis() as broker:
        for run in range(args.rounds):
            cluster = Cluster(masters=3, replicas=1, fsync="everysec")
            try:
                with tempfile.TemporaryDirectory(prefix="crawler-failover-") as out:
                    rows.append(one_run(args, broker, cluster, Path(out), run))
            finally:
                cluster.stop()
            _util.log(args, f"run {run}: {rows[-1]}")
    columns = [c for c in rows[0] if c != "kill_log"] if rows else None
    _util.emit(
        args,
        {"runs": rows, "rate": args.rate if math.isfinite(args.rate) else "inf"},
        [_util.table("uncoordinated master kills during one crawl", rows, columns)],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
