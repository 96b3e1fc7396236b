"""Fault injection for tests with real processes: a redis-server of the test's own (AOF on,
fixed port) that can be shut down, killed and started again, and a crawl harness that records
when the crawled site saw each request."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler_tasks.surface.embedded import free_port, redis_binary, wait_for_redis


class RestartableRedis:
    """A redis-server on a fixed free port whose data survives restarts (AOF, fsync always, so
    a SIGKILL loses nothing that was acknowledged)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="crawler-faults-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir.name]
        args += ["--maxmemory-policy", "noeviction"]
        log = open(Path(self.dir.name) / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen([redis_binary(), *args], stdout=log, stderr=log)
        wait_for_redis(self.url, self.proc)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def shutdown(self) -> None:
        """``SHUTDOWN`` (AOF flushed), as an operator restarting Redis does."""
        with contextlib.suppress(redis.ConnectionError):
            self.client().shutdown()
        assert self.proc is not None
        self.proc.wait(10)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        self.dir.cleanup()


def start_site_crawl(settings, *servers, **options):  # type: ignore[no-untyped-def]
    """A crawl of the test sites ``servers`` (sitegen's SiteServer) from their roots: private
    addresses allowed, their hosts only, every host at full speed (``rate``: the sites send
    no Crawl-delay), unless ``options`` say otherwise."""
    from crawler_tasks import start_crawl

    hosts = [s.address for s in servers]
    opts = {"allow_private_networks": True, "allowed_domains": hosts, "rate": math.inf}
    seeds = [s.base_url + "/" for s in servers]
    return start_crawl(seeds, settings=settings, **{**opts, **options})


def records(crawl) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(r["url"] for r in crawl.pages())


def first_request_after(server, when: float, exclude=frozenset()) -> float | None:  # type: ignore[no-untyped-def]
    """Seconds from ``when`` (time.monotonic()) to the site's first request for a path not in
    ``exclude``; None if there was none."""
    times = [r.time for r in server.requests() if r.time >= when and r.path not in exclude]
    return min(times) - when if times else None


@contextlib.contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A private vhost on the machine's RabbitMQ (127.0.0.1:5672, guest), deleted after."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl not found: RabbitMQ is not installed on this machine")
    vhost = f"crawler-test-{os.getpid()}-{time.monotonic_ns()}"
    subprocess.run(["rabbitmqctl", "add_vhost", vhost], check=True, capture_output=True)
    perms = ["rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]
    subprocess.run(perms, check=True, capture_output=True)
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True)
