"""Real parts only: a private redis-server for the session (flushed between tests), real Celery
worker processes, real HTTP servers on loopback (see sitegen.py)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawler_tasks.settings import Settings, load
from crawler_tasks.surface.embedded import (
    local_workers,
    private_redis,
)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not on PATH (.ci/run installs it)")
    with private_redis() as url:
        yield url


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server)
    # Everything but kombu's queue bindings, which the broker needs to route messages and which
    # a publisher declares only once per connection.
    keys = [k for k in client.scan_iter(count=1000) if not k.startswith(b"_kombu.binding.")]
    if keys:
        client.delete(*keys)
    client.close()
    yield redis_server


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return load(env={}, broker_url=redis_url, output_dir=str(tmp_path / "out"))


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Extra environment for the worker processes a test starts (override per test)."""
    return {}


@pytest.fixture
def workers(redis_url: str, tmp_path: Path, worker_env: dict[str, str]) -> Iterator[list]:
    """The recommended layout as real processes: a threads-pool fetch worker and a prefork
    parse worker. Their logs are printed if the test fails."""
    log_dir = tmp_path / "worker-logs"
    log_dir.mkdir()
    env = {"CRAWLER_DISPATCH_INTERVAL": "0.02", **worker_env}
    with local_workers(
        redis_url,
        fetch_threads=8,
        parsers=1,
        fetchers=1,
        log_dir=str(log_dir),
        events=True,
        extra_env=env,
    ) as procs:
        yield procs
    for log in sorted(log_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            print(f"--- {log.name}\n{text[-4000:]}")


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


@pytest.fixture(autouse=True)
def _no_crawler_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CRAWLER_"):
            monkeypatch.delenv(name)
    # Workers write under their own CRAWLER_OUTPUT_DIR: the one the `settings` fixture reads.
    monkeypatch.setenv("CRAWLER_OUTPUT_DIR", str(tmp_path / "out"))
