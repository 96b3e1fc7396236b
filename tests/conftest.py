"""Real parts only: a private redis-server for the session (flushed between tests), real Celery
worker processes, real HTTP servers on loopback (see tests/support/sitegen.py).

Worker processes write their logs under the test's ``worker_logs`` directory; a traceback in
any of them fails the test unless the test allows it with
``@pytest.mark.allow_worker_errors("regex", ...)`` (matched against each traceback)."""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis
from celery import Celery

from crawler_tasks.settings import Settings, load
from crawler_tasks.surface.embedded import (
    local_workers,
    private_redis,
)
from crawler_tasks.worker.process.app import broker_transport
from tests.support.cluster import Cluster
from tests.support.driver import Driver
from tests.support.processes import stop_together
from tests.support.scheduling import SuiteScheduling
from tests.support.seaweed import Seaweed
from tests.support.seaweed import seaweed as start_seaweed
from tests.support.worker_logs import unexpected_tracebacks

# celery_app / celery_worker (an embedded worker in a thread of the test process); the
# fixtures below point them at the project's app and the test's Redis.
pytest_plugins = ("celery.contrib.pytest",)

# CI replays the same examples on every run (a failure there reproduces); locally each run
# explores new ones. Either way a failure prints the blob that replays it (@reproduce_failure).
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True, database=None)
hypothesis.settings.register_profile("local", print_blob=True)
hypothesis.settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "local")
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SuiteScheduling:
    """``make test`` (``pytest -n N``): see tests/support/scheduling.py."""
    return SuiteScheduling(config, log)


#: A test's tier is the directory it stands in: tests/<directory>/... is marked <marker>
#: (``-m fault`` and the like select as before; the Makefile's targets name directories).
TIER_MARKERS = {
    "unit": "unit: pure logic: no process, no Redis (`make test-fast`)",
    "integration": "integration: real redis-server, workers and CLI processes (`make test`)",
    "faults": "fault: a fault scenario: a kill, a freeze, a full disk, an outage, overload "
    "(`make test-faults`; `make test` leaves them out)",
    "bench": "bench: every bench script once at tiny sizes (`make test-bench`)",
}
TESTS = Path(__file__).resolve().parent

#: Fixtures a unit test may not use: each needs a redis-server (``redis_url``, ``client``,
#: ``settings``, ``driver``, ``workers``, ``celery_app`` and the cluster's all build on them).
_NOT_UNIT = frozenset({"redis_server", "redis_cluster", "seaweed"})


def _tier(item: pytest.Item) -> str | None:
    try:
        return item.path.resolve().relative_to(TESTS).parts[0]
    except ValueError:  # a path outside tests/ (pytest given some other directory)
        return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item)
        if tier not in TIER_MARKERS:
            continue
        item.add_marker(TIER_MARKERS[tier].split(":", 1)[0])
        used = _NOT_UNIT & set(getattr(item, "fixturenames", ()))
        if tier == "unit" and used:
            raise pytest.UsageError(
                f"{item.nodeid} uses {', '.join(sorted(used))}: a test that needs Redis "
                "belongs in tests/integration (tests/unit is no process, no Redis)"
            )


@pytest.fixture(autouse=True)
def _unit_uses_no_redis(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that connects to a Redis (a server of its own, say) fails saying so."""
    if request.node.get_closest_marker("unit") is None:
        return
    from redis.connection import AbstractConnection

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a unit test connected to Redis: it belongs in tests/integration")

    monkeypatch.setattr(AbstractConnection, "connect", refused)


def pytest_configure(config: pytest.Config) -> None:
    for line in TIER_MARKERS.values():
        config.addinivalue_line("markers", line)
    config.addinivalue_line(
        "markers",
        "slow: (on a module, as ``pytestmark``) its tests take 20-70 s: `pytest -n N` hands "
        "them out first (tests/support/scheduling.py; tests/faults and tests/bench are slow "
        "by their place)",
    )
    config.addinivalue_line(
        "markers",
        "one_process: (on a module, as ``pytestmark``) its tests share one costly module "
        "fixture: `pytest -n N` runs the module whole on one process (tests/support/scheduling.py)",
    )
    config.addinivalue_line(
        "markers",
        "allow_worker_errors(*patterns): tracebacks in worker logs matching one of these "
        "regular expressions do not fail the test",
    )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not on PATH (.ci/run installs it)")
    with private_redis() as url:
        yield url


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Seaweed]:
    """A real S3 API server (SeaweedFS, tests/support/seaweed.py), one per test process."""
    with start_seaweed() as server:
        yield server


@pytest.fixture
def s3(seaweed: Seaweed, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A new empty bucket of ``seaweed`` as ``s3://BUCKET/PREFIX``, and this process's AWS
    environment pointed at the server (for code under test that builds its own client)."""
    from crawler_tasks.state.objects import s3 as s3_store

    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    s3_store._clients.clear()  # a client of the environment just set
    bucket = seaweed.make_bucket(f"t{os.getpid()}-{next(_buckets)}")
    yield f"s3://{bucket}/crawls"
    s3_store._clients.clear()


_buckets = itertools.count()


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


# A module using these is marked ``one_process`` (tests/support/scheduling.py): one cluster a
# module, each test's state flushed.
@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[Cluster]:
    """A real 3-master Redis Cluster on loopback (tests/support/cluster.py)."""
    c = Cluster(masters=3)
    yield c
    c.stop()


@pytest.fixture
def cluster_url(redis_cluster: Cluster, redis_url: str) -> str:
    redis_cluster.wait_ok()
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture
def csettings(redis_url: str, cluster_url: str, tmp_path: Path) -> Settings:
    """Broker: the session's standalone Redis; crawl state: the cluster."""
    return load(
        env={}, broker_url=redis_url, redis_url=cluster_url, output_dir=str(tmp_path / "out")
    )


@pytest.fixture
def driver(settings: Settings) -> Iterator[Driver]:
    """The pipeline in the test's own thread (tests/support/driver.py), against the real Redis."""
    d = Driver(settings)
    yield d
    d.close()


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Extra environment for the worker processes a test starts (override per test)."""
    return {}


@pytest.fixture
def worker_logs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """Where the test's worker processes log (pass ``log_dir=str(worker_logs)`` to
    ``local_workers``). After the test, any traceback not allowed by the test's
    ``allow_worker_errors`` marker fails it."""
    log_dir = tmp_path / "worker-logs"
    log_dir.mkdir(exist_ok=True)
    yield log_dir
    allowed = [p for m in request.node.iter_markers("allow_worker_errors") for p in m.args]
    found = unexpected_tracebacks(log_dir, allowed)
    if found:
        pytest.fail("traceback in a worker log:\n" + "\n".join(found)[-8000:], pytrace=False)


@pytest.fixture
def workers(redis_url: str, worker_logs: Path, worker_env: dict[str, str]) -> Iterator[list]:
    """The recommended layout as real processes, at the default settings (``worker_env`` adds
    to them): a threads-pool fetch worker and a prefork parse worker."""
    with local_workers(
        redis_url,
        redis_url,
        fetch_threads=8,
        parsers=1,
        fetchers=1,
        log_dir=str(worker_logs),
        events=True,
        extra_env=worker_env,
    ) as procs:
        try:
            yield procs
        finally:
            stop_together(procs)


class _LoggedTracebacks(logging.Handler):
    """Every record logged with a traceback: what a worker process's log would show."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.found.append(self.format(record))


@pytest.fixture
def celery_app(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Celery]:
    """The project's app (its tasks, dispatcher step and settings), for Celery's
    ``celery_worker`` fixture: one worker in this process, consuming every queue, against the
    test's Redis, writing under the test's output directory. For a test that needs ONE worker
    and never kills it (the ``workers`` fixture's processes for the others). As with those,
    a traceback logged while it runs fails the test unless ``allow_worker_errors`` allows it."""
    from crawler_tasks.worker.tasks import app

    saved = {name: app.conf[name] for name in _APP_SETTINGS}
    app.close()  # connections of an earlier broker URL
    app.conf.update(
        broker_url=settings.broker_url,
        broker_transport=broker_transport(settings.broker_url),
        crawler_settings=settings,
    )
    logged = _LoggedTracebacks()
    logging.getLogger().addHandler(logged)
    try:
        yield app
    finally:
        logging.getLogger().removeHandler(logged)
        # The worker has stopped (celery_worker ends first). A dispatcher thread still running
        # would build its next context from the settings restored below (the import-time
        # defaults: the machine's Redis on 6379).
        left = [t for t in threading.enumerate() if t.name == "crawler-dispatcher"]
        app.conf.crawler_runtime.close()  # the next test's context has its settings
        app.close()
        if not left:
            app.conf.update(saved)
    if left:
        pytest.fail("the embedded worker left its dispatcher thread running", pytrace=False)
    allowed = [p for m in request.node.iter_markers("allow_worker_errors") for p in m.args]
    found = [tb for tb in logged.found if not any(re.search(p, tb) for p in allowed)]
    if found:
        pytest.fail("traceback logged by the worker:\n" + "\n".join(found)[-8000:], pytrace=False)


_APP_SETTINGS = ("broker_url", "broker_transport", "crawler_settings")


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    return "threads"  # as the fetch workers: the dispatcher and fetches side by side


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict[str, object]:
    # Celery's ping check waits on a task result: the app keeps none (task_ignore_result).
    return {"concurrency": 8, "perform_ping_check": False, "shutdown_timeout": 30.0}


@pytest.fixture(autouse=True)
def _no_crawler_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CRAWLER_"):
            monkeypatch.delenv(name)
    # Workers write under their own CRAWLER_OUTPUT_DIR: the one the `settings` fixture reads.
    monkeypatch.setenv("CRAWLER_OUTPUT_DIR", str(tmp_path / "out"))
