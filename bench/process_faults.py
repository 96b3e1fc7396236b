"""What a fetch process's death or freeze, and a full output disk, cost a crawl (issue 50).

At the project's default timings (worker_dead_seconds 10, lost_message_seconds 15), real worker
processes (two threads fetch processes, one parse process, as the README lays them out) and a
private Redis as broker and state:

* ``kill``: a one-host crawl at ``--rate`` requests/s; one fetch process SIGKILLed (and started
  again) every 5 s while it runs;
* ``freeze``: a crawl of 4 hosts at half that rate (host affinity on); one fetch process
  SIGSTOPped for 30 s, then woken;
* ``disk``: a one-host crawl (rate unbounded) whose output disk (a tmpfs, root only) is full
  for 15 s: 120 KB left, one page of ~200 KB among small ones.

Printed per run: the longest stall (the longest wait between two requests the site saw, after
the first fault), requests per URL (the most any URL got, and how many URLs got more than
one), the heartbeats left in ``crawler:workers`` of processes no longer running (read once
the crawl is over and ``worker_dead_seconds`` + 4 s later), and for ``freeze`` the seconds from
waking until the woken process is back among the holders and until a URL is released to it.
``--runs N`` repeats each scenario."""

from __future__ import annotations

import base64
import math
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import _util
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.state.formats import Inflight
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.embedded import private_redis
from tests.faults.test_faults import Cluster
from tests.support.sitegen import running_sites

DEFAULTS = {
    "CRAWLER_WORKER_DEAD_SECONDS": "10",
    "CRAWLER_LOST_MESSAGE_SECONDS": "15",
    "CRAWLER_ORPHAN_RECORD_SECONDS": "30",
}


def tag(c: Cluster, name: str) -> str:
    return f"{socket.gethostname()}-{c.procs[name].pid}"


def longest_stall(times: list[float], since: float) -> float:
    after = sorted([since, *(t for t in times if t >= since)])
    return max((b - a for a, b in zip(after, after[1:], strict=False)), default=0.0)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def left_beats(client: redis.Redis) -> int:
    """Heartbeats in crawler:workers of processes not running now (ids are "host-pid", and
    every process here runs on this host; a prefork pool's children beat too)."""
    ids = [w.decode() for w in client.hkeys(Keys().workers)]
    return len([w for w in ids if not running(int(w.rsplit("-", 1)[1]))])


def per_url(requests: list[Any]) -> tuple[int, int]:
    counts = Counter((r.host, r.path) for r in requests if r.path != "/robots.txt")
    return max(counts.values(), default=0), sum(1 for n in counts.values() if n > 1)


def finish(crawl: Any, timeout: float) -> str:
    try:
        return str(crawl.wait(timeout=timeout)["status"])
    except TimeoutError:
        return "unfinished"


def kill(args: Any, url: str, c: Cluster, out: Path) -> dict[str, Any]:
    settings = load(env={}, broker_url=url, redis_url=url, output_dir=str(out))
    with running_sites(["127.0.0.71"], args.pages, 5) as (_graph, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True,
            rate=args.rate,
        )  # fmt: skip
        while not servers[0].requests():
            time.sleep(0.05)
        first = time.monotonic()
        kills = 0
        while crawl.progress()["status"] == "running":
            time.sleep(5)
            if crawl.progress()["status"] != "running":
                break
            c.kill("fetch1")
            kills += 1
        status = finish(crawl, args.timeout)
        requests = servers[0].requests()
    most, twice = per_url(requests)
    return {"status": status, "faults": kills, "stall_s": longest_stall(
        [r.time for r in requests], first), "max_requests_per_url": most,
        "urls_requested_twice": twice}  # fmt: skip


def freeze(args: Any, url: str, c: Cluster, out: Path) -> dict[str, Any]:
    settings = load(env={}, broker_url=url, redis_url=url, output_dir=str(out))
    client, keys = redis.Redis.from_url(url), Keys()
    hosts = [f"127.0.0.{n}" for n in (72, 73, 74, 75)]
    with running_sites(hosts, args.pages, 5) as (_graph, servers):
        seeds = [s.base_url + "/" for s in servers]
        rate = args.rate / 2  # still running when the frozen process wakes after 30 s
        crawl = start_crawl(seeds, settings=settings, allow_private_networks=True, rate=rate)
        time.sleep(8)
        frozen = tag(c, "fetch1")
        c.signal("fetch1", signal.SIGSTOP)
        stopped_at = time.monotonic()
        time.sleep(30)
        c.signal("fetch1", signal.SIGCONT)
        woke = time.monotonic()
        back = released = None
        while crawl.progress()["status"] == "running" and time.monotonic() - woke < 60:
            if back is None and client.sismember(keys.fetchers, frozen):
                back = time.monotonic() - woke
            values = [v for p in crawl.ck.parts for v in crawl.client.hvals(p.inflight)]
            if any(Inflight.parse(v.decode()).worker == frozen for v in values):
                released = time.monotonic() - woke
                break
            time.sleep(0.1)
        status = finish(crawl, args.timeout)
        requests = [r for s in servers for r in s.requests()]
    most, twice = per_url(requests)
    return {"status": status, "faults": 1, "stall_s": longest_stall(
        [r.time for r in requests], stopped_at), "max_requests_per_url": most,
        "urls_requested_twice": twice, "rejoined_s": back, "first_release_s": released}  # fmt: skip


def disk(args: Any, url: str, c: Cluster, out: Path) -> dict[str, Any]:
    mount = out / "disk"
    mount.mkdir()
    opts = ["-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)]
    if subprocess.run(["mount", *opts], capture_output=True).returncode != 0:
        return {"status": "skipped (cannot mount a tmpfs: needs root)"}
    try:
        settings = load(env={}, broker_url=url, redis_url=url, output_dir=str(mount / "out"))
        big = base64.b64encode(os.urandom(150_000))
        with running_sites(["127.0.0.76"], args.pages // 2, 4) as (_graph, servers):
            site = servers[0]
            site.extra_routes["/big"] = lambda h: h.send_body(200, big, "text/plain")
            st = os.statvfs(mount)
            filler = mount / "filler"
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 120_000))
            crawl = start_crawl(
                [site.base_url + "/", site.base_url + "/big"], settings=settings,
                allow_private_networks=True, rate=math.inf, output=str(mount / "out"),
            )  # fmt: skip
            while not crawl.progress()["output"]:
                time.sleep(0.1)
            full_at = time.monotonic()
            time.sleep(15)
            filler.unlink()
            status = finish(crawl, args.timeout)
            requests = site.requests()
        most, twice = per_url(requests)
        return {"status": status, "faults": 1, "stall_s": longest_stall(
            [r.time for r in requests], full_at + 15), "max_requests_per_url": most,
            "urls_requested_twice": twice}  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


SCENARIOS = {"kill": kill, "freeze": freeze, "disk": disk}


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--pages", type=int, default=150, help="pages of the one-host site")
    p.add_argument("--rate", type=float, default=4.0, help="requests/s per host")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    rows = []
    for run in range(args.runs):
        for name in args.only or SCENARIOS:
            with ExitStack() as stack:
                url = stack.enter_context(private_redis())
                out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="faults-")))
                (out / "logs").mkdir()
                env = {**DEFAULTS, "CRAWLER_OUTPUT_DIR": str(out)}
                c = Cluster(url, out / "logs", env)
                stack.callback(c.stop)
                c.start_layout()
                client = redis.Redis.from_url(url)
                while client.scard(Keys().fetchers) < 2:
                    time.sleep(0.2)
                row = {"scenario": name, "run": run, **SCENARIOS[name](args, url, c, out)}
                time.sleep(float(DEFAULTS["CRAWLER_WORKER_DEAD_SECONDS"]) + 4)
                row["dead_beats_left"] = left_beats(client)
                rows.append(row)
            _util.log(args, f"{rows[-1]}")
    _util.emit(
        args,
        {"runs": rows, "rate": args.rate},
        [_util.table("process faults at the default timings (issue 50)", rows)],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
