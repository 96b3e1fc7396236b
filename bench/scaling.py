"""Scaling: the broad-crawl simulator (bench/broad.py's web) crawled with 1, 2 and 4 fetch
processes, the crawl state on one Redis (also the broker) or on a 3-master Redis Cluster (with
a standalone broker beside it), all on this machine.

    .venv/bin/python bench/scaling.py                            # 1,000 hosts x 5 pages, fast mode
    .venv/bin/python bench/scaling.py --fetchers 1,2 --states one --hosts 300

Prints pages/s (from the server's log), Redis commands per page, commands/s and CPU share of
every Redis node (node 0 is the broker), and, from those, what a cluster of N state masters
and M worker hosts sustains on paper: each node's capacity (``--node-capacity`` commands/s;
measure yours with ``redis-benchmark``) over the commands one page costs it.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import _util
from broad import Web, add_latency, read_latency, run_ours

COLUMNS = [
    "state",
    "fetchers",
    "pages_per_s",
    "e2e_pages_per_s",
    "missing",
    "duplicates",
    "cpu_ms_per_page",
    "redis_cmds_per_page",
    "cmds_per_s_by_node",
    "redis_cpu_share_by_node",
]


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--pages", type=int, default=5, help="HTML pages per host")
    p.add_argument("--mode", default="fast", choices=["fast", "polite"])
    p.add_argument("--fetchers", default="1,2,4", help="fetch processes per run")
    p.add_argument("--states", default="one,cluster")
    p.add_argument("--threads", type=int, default=256)
    p.add_argument("--fast-conn", type=int, default=4)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--node-capacity", type=float, default=100_000, help="commands/s per node")
    p.add_argument("--keep")
    p.add_argument("--events", action="store_true", help="workers send task events (-E)")
    p.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE")
    add_latency(p)
    args = p.parse_args()
    args.latency = read_latency(p, args.latency)
    args.worker_env = dict(kv.split("=", 1) for kv in args.worker_env)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        web = Web(args, tmp)
        try:
            for state in args.states.split(","):
                for n in (int(x) for x in args.fetchers.split(",")):
                    _util.log(args, f"state={state}, {n} fetch processes")
                    layout = f"threads:{args.threads}x{n}:1"
                    row = run_ours(args, web, args.mode, layout, state)
                    rows.append({"state": state, "fetchers": n, **row})
        finally:
            web.close()
    tables = [
        _util.table("Pages/s by fetch processes and state", rows, COLUMNS),
        _util.table("On paper", [paper(r, args.node_capacity) for r in rows]),
    ]
    _util.emit(args, {"runs": rows}, tables)
    return 0 if all(r.get("missing") == 0 for r in rows) else 1


def paper(r: dict[str, Any], capacity: float) -> dict[str, Any]:
    """Pages/s the broker and N state masters allow: capacity / commands per page on each."""
    pages_s = max(r.get("pages_per_s", 0.0), 1e-9)
    by_node = r.get("cmds_per_s_by_node") or [0]
    broker = by_node[0] / pages_s
    state = sum(by_node[1:]) / pages_s if len(by_node) > 1 else 0.0
    out = {"state": r["state"], "fetchers": r["fetchers"], "broker_cmds_per_page": broker}
    if state:
        out["state_cmds_per_page"] = state
        for masters in (3, 6, 12):
            out[f"pages_s_{masters}_masters"] = round(masters * capacity / state)
    out["pages_s_broker_cap"] = round(capacity / max(broker, 1e-9))
    out["pages_s_per_worker_core"] = round(1000 / max(r.get("cpu_ms_per_page", 1e9), 1e-9), 1)
    return out


if __name__ == "__main__":
    sys.exit(main())
