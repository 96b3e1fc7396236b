"""Nothing of a dead fetch process is left in Redis (issue 33): after it is SIGKILLed and
declared dead, its direct queue, that queue's kombu bindings, its ``fetchers`` entry and its
``held:<worker>`` set and its heartbeat field in ``workers`` are gone; after a warm shutdown, all that is gone by the time it has
exited (worker/dispatch/departure.py). Real workers, real Redis (the broker too)."""

from __future__ import annotations

import socket

import pytest
import redis

from crawler_tasks.state.keys import Keys
from crawler_tasks.worker.process.queues import DIRECT_PREFIX
from tests.faults.test_faults import cluster
from tests.support.processes import stop_together
from tests.support.waiting import wait_until

KILLS = 10


def tag(c, name: str) -> str:  # type: ignore[no-untyped-def]
    """The worker id (process_tag) of one of the cluster's processes."""
    return f"{socket.gethostname()}-{c.procs[name].pid}"


def leftovers(client: redis.Redis, keys: Keys, dead: set[str], beats: bool = True) -> list[str]:
    """What Redis still holds of the ``dead`` fetch processes (bindings of other tests'
    processes stay: the fixture keeps kombu's bindings between tests)."""
    left = [f"fetchers: {m.decode()}" for m in client.smembers(keys.fetchers)]
    left = [entry for entry in left if entry.removeprefix("fetchers: ") in dead]
    # kombu's binding sets, and (kombu >= 5.5) their mirrors of the bindings that never expire.
    sets = [*client.scan_iter(match="_kombu.binding.*")]
    sets += client.scan_iter(match="_kombu.binding_permanent.*")
    for key in sets:
        for member in client.smembers(key):
            queue = member.decode(errors="replace").rsplit("\x06\x16", 1)[-1]
            if queue.removeprefix(DIRECT_PREFIX) in dead:
                left.append(f"{key.decode()}: {queue}")
    for key in client.scan_iter(match=f"{DIRECT_PREFIX}*"):
        if key.decode().removeprefix(DIRECT_PREFIX).split("\x06\x16")[0] in dead:
            left.append(f"queue: {key.decode()}")
    left += [f"held: {w}" for w in dead if client.exists(keys.held(w))]
    # Its heartbeat too (issue 50: one field per killed process stayed for a day).
    left += [f"workers: {w}" for w in dead if beats and client.hexists(keys.workers, w)]
    return left


@pytest.mark.allow_worker_errors(".*")
def test_nothing_of_a_dead_fetch_process_is_left(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """fetch1 is SIGKILLed 10 times, each time once its successor has joined the holders
    (its direct queue bound); fetch2's dispatcher declares each dead (4 s) and removes it."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys(settings.key_prefix)
    with cluster(redis_url, tmp_path) as c:
        c.start("fetch1", "fetch")
        c.start("fetch2", "fetch")
        dead: set[str] = set()
        for _ in range(KILLS):
            wait_until(lambda: client.sismember(keys.fetchers, tag(c, "fetch1")), timeout=60)
            dead.add(tag(c, "fetch1"))
            c.kill("fetch1")
        live = {tag(c, "fetch1"), tag(c, "fetch2")}
        wait_until(lambda: {m.decode() for m in client.smembers(keys.fetchers)} >= live, 60)
        # Dead after 4 s (QUICK), removed by the next refresh (once a second).
        try:
            wait_until(lambda: not leftovers(client, keys, dead), timeout=30, interval=0.5)
        except AssertionError:
            pytest.fail(f"after {KILLS} kills, left: {leftovers(client, keys, dead)}")

        def bound() -> int:
            bindings = [
                m for k in client.scan_iter(match="_kombu.binding.*") for m in client.smembers(k)
            ]
            return len([m for m in bindings if DIRECT_PREFIX.encode() in m])

        # Waited for: the last fetch1 joins the holders (its dispatcher's first round) before
        # its consumer has always bound its direct queue. A queue deleted by mistake would
        # not come back.
        try:
            wait_until(lambda: bound() >= 2, timeout=15, interval=0.5)
        except AssertionError:
            pytest.fail(f"the live processes' bindings are not all there: {bound()} of 2")


@pytest.mark.allow_worker_errors(".*")
def test_nothing_of_a_stopped_fetch_process_is_left(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """A fetch process's warm shutdown removes it from the holders before it exits, not a dead
    threshold later: before, its ``fetchers`` entry and fresh heartbeat made the next
    dispatcher to start publish its hosts' URLs to its queue, which nobody took, and take
    them back as lost (issue 33's false take-back at a fresh start)."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys(settings.key_prefix)
    with cluster(redis_url, tmp_path) as c:
        c.start("fetch1", "fetch")
        c.start("fetch2", "fetch")
        both = {tag(c, "fetch1"), tag(c, "fetch2")}
        wait_until(lambda: {m.decode() for m in client.smembers(keys.fetchers)} >= both, 60)
        stopped = tag(c, "fetch1")
        stop_together([c.procs["fetch1"]])
        assert c.procs["fetch1"].returncode == 0, "a warm shutdown, not a kill"
        # At once, not after worker_dead_seconds (4 s): nothing left, nothing leaving.
        # Its heartbeat ages instead (departure.py): gone once it is past the dead threshold.
        left = leftovers(client, keys, {stopped}, beats=False)
        assert not left, left
        assert not client.smembers(keys.leaving)
        wait_until(lambda: not leftovers(client, keys, {stopped}), timeout=15, interval=0.5)
        assert client.sismember(keys.fetchers, tag(c, "fetch2"))
        survivor = f"{DIRECT_PREFIX}{tag(c, 'fetch2')}".encode()
        bindings = [
            m for k in client.scan_iter(match="_kombu.binding.*") for m in client.smembers(k)
        ]
        assert any(m.endswith(survivor) for m in bindings), "fetch2's queue is still bound"
    log = (tmp_path / "logs" / "fetch1.log").read_text(errors="replace")
    assert "taken for dead instead" not in log, log[-2000:]
