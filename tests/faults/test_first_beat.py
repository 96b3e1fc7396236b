"""No false "lost" at a fresh start (issue 33): a worker process writes its first heartbeat
when it starts (the pool's children at worker_process_init, the main process in the
dispatcher's bootstep), not when its first task builds its context; so the reclaim never
meets a task begun by a process it has not seen beat. Workers are started afresh on a crawl
waiting for them, again and again, and their logs must not say that a URL was taken back.

A take-back names the process its URL was marked as held by ("r:<host>-<pid>"); the failure
says which start's process that was. The one seen in CI named the fetch process of the start
before: a stopped fetch process stayed in ``fetchers`` with a fresh heartbeat, so the next
start's first dispatcher published the seed to its queue, and took it back once that beat
was old (worker/dispatch/departure.py). Each stop is therefore checked to leave no holder behind,
which does not depend on that race being won."""

from __future__ import annotations

import math
import re
import socket
import time

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.workers import beats
from tests.faults.test_faults import PARSE_TASKS, cluster
from tests.support.processes import stop_together
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

#: Fresh starts at most, and the time they may take together (each ~11 s here: ~5 s to
#: start, ~2 s to crawl, ~4 s to stop).
STARTS, BUDGET_S, AT_LEAST = 20, 120.0, 8
TOOK_BACK = re.compile(r"took .* back")
MARKED = re.compile(r"\((\w):(\S+?): its worker")


@pytest.mark.allow_worker_errors(".*")
def test_every_process_beats_before_any_task(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """No crawl, no task: the fetch process, the parse worker's main process and its two pool
    children all beat (before the change, the children beat only once a task came)."""
    client = redis.Redis.from_url(redis_url)
    with cluster(redis_url, tmp_path) as c:
        c.start("fetch1", "fetch")
        c.start("parse", "parse")  # prefork, 2 children
        wait_until(lambda: len(beats(client, Keys(settings.key_prefix))) >= 4, timeout=60)


@pytest.mark.allow_worker_errors(".*")
def test_no_take_back_at_fresh_starts(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    client, keys = redis.Redis.from_url(redis_url), Keys(settings.key_prefix)
    t0, started = time.monotonic(), []  # per start: {worker id: process name}
    with running_sites(["127.0.0.93"], 20, 3) as (_graph, servers):
        seed = servers[0].base_url + "/"
        while len(started) < STARTS and time.monotonic() - t0 < BUDGET_S:
            crawl = start_crawl(
                [seed], settings=settings, allow_private_networks=True, rate=math.inf
            )
            # Every page through a parse task: the prefork children's first tasks come at once.
            with cluster(redis_url, tmp_path, **PARSE_TASKS) as c:
                c.start("fetch1", "fetch")
                c.start("parse", "parse")
                t1 = time.monotonic()
                started.append({tag(p.pid): name for name, p in c.procs.items()})
                summary = crawl.wait(timeout=60)
                t2 = time.monotonic()
                stop_together(c.procs.values())  # both at once (then the cluster's stop is quick)
            print(
                f"start {len(started) - 1}: crawl {t2 - t1:.1f}s, stop {time.monotonic() - t2:.1f}s"
            )
            assert summary["status"] == "finished"
            left = {m.decode() for m in client.smembers(keys.fetchers)} & set(started[-1])
            assert not left, f"stopped, still a holder of hosts: {left}"
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").glob("*.log"))
    taken = [whose(line, started) for line in logs.splitlines() if TOOK_BACK.search(line)]
    print(f"{len(started)} fresh starts, {len(taken)} take-backs")
    assert len(started) >= AT_LEAST, f"only {len(started)} starts in {BUDGET_S:.0f} s"
    assert not taken, f"{len(taken)} false take-backs in {len(started)} starts, e.g. {taken[:2]}"


def tag(pid: int) -> str:
    """A worker id (output.process_tag) of a process of this host."""
    return f"{socket.gethostname()}-{pid}"


def whose(line: str, started: list[dict[str, str]]) -> str:
    """A take-back's log line, with the start and process its URL was marked as held by (a
    pool child is not named: its parent's pid is the one known here)."""
    found = MARKED.search(line)
    worker = found.group(2) if found else "?"
    named = [f"start {i}'s {d[worker]}" for i, d in enumerate(started) if worker in d]
    return f"{line.strip()[-200:]} [{worker}: {', '.join(named) or 'not a main process'}]"
