"""Real parts only: a private redis-server for the session (flushed between tests), real Celery
worker processes, real HTTP servers on loopback (see sitegen.py).

Worker processes write their logs under the test's ``worker_logs`` directory; a traceback in
any of them fails the test unless the test allows it with
``@pytest.mark.allow_worker_errors("regex", ...)`` (matched against each traceback)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis
from celery import Celery
from cluster import Cluster
from driver import Driver
from scheduling import SuiteScheduling

from crawler_tasks.settings import Settings, load
from crawler_tasks.surface.embedded import (
    local_workers,
    private_redis,
    stop_process,
)
from crawler_tasks.worker.process.app import broker_transport

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
    """``make test`` (``pytest -n N``): see tests/scheduling.py."""
    return SuiteScheduling(config, log)


#: The fault scenarios (``make test-faults``; ``make test`` leaves them out): each kills,
#: freezes, fills or overloads something for 20-120 s. These modules hold nothing else; a
#: kill scenario in another module is marked ``@pytest.mark.fault`` where it stands.
FAULT_MODULES = frozenset(
    {
        "test_faults.py",
        "test_redis_faults.py",
        "test_maxmemory.py",
        "test_disk_full.py",
        "test_overload.py",
        "test_overload_cluster.py",
        "test_first_beat.py",
        "test_failover.py",
        "test_partition.py",
        "test_archive_faults.py",
        "test_dead_process_cleanup.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in FAULT_MODULES:
            item.add_marker(pytest.mark.fault)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fault: a fault scenario (a kill, a freeze, a full disk, an outage, overload): "
        "`make test-faults` runs these, `make test` the others",
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


# A module using these runs whole on one xdist process (tests/scheduling.py, ONE_PROCESS): one
# cluster a module, each test's state flushed.
@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[Cluster]:
    """A real 3-master Redis Cluster on loopback (tests/cluster.py)."""
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
    """The pipeline in the test's own thread (tests/driver.py), against the real Redis."""
    d = Driver(settings)
    yield d
    d.close()


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Extra environment for the worker processes a test starts (override per test)."""
    return {}


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):$", re.M)


def tracebacks(text: str) -> list[str]:
    """Each traceback in a log, with the log line before it (Celery names the task there) and
    up to the exception line (the first unindented line after the frames)."""
    found = []
    for match in _TRACEBACK.finditer(text):
        before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
        lines = text[match.end() :].lstrip("\n").splitlines()
        end = next((i for i, line in enumerate(lines) if line and not line[0].isspace()), None)
        body = lines if end is None else lines[: end + 1]
        found.append("\n".join([before, match.group(0), *body]))
    return found


def unexpected_tracebacks(log_dir: Path, allowed: list[str]) -> list[str]:
    out = []
    for log in sorted(log_dir.glob("*.log")):
        for tb in tracebacks(log.read_text(errors="replace")):
            if not any(re.search(pattern, tb) for pattern in allowed):
                out.append(f"--- {log.name}\n{tb}")
    return out


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


def stop_together(procs: Iterable[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """Celery's warm shutdown of every process at once: SIGTERM to all, then wait for all.
    One by one (``local_workers`` on exit), a prefork worker's ~3 s shutdown adds to the
    threads worker's ~1 s after every test. A process still running after ``grace`` gets
    ``stop_process`` (SIGKILL of its group)."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        stop_process(proc, grace=1.0)


@pytest.fixture
def workers(redis_url: str, worker_logs: Path, worker_env: dict[str, str]) -> Iterator[list]:
    """The recommended layout as real processes, at the default settings (``worker_env`` adds
    to them): a threads-pool fetch worker and a prefork parse worker."""
    with local_workers(
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


class RoundTrips:
    """Round trips to Redis that this thread makes in the block (each command or pipeline
    sent: redis-py's ``send_packed_command``), counted in the client: ``.count``.

    Not Redis's ``total_reads_processed``: that counter is the server's, and the test's
    Redis is shared by the tests of its process, so a client an earlier test left (a thread,
    a worker) adds to it; a one-round-trip publish once read as two. A round trip the code
    makes on another thread is not counted here, so a test of one thread's round trips
    cannot pass by missing some of them."""

    def __init__(self) -> None:
        self.count = 0
        self._thread = threading.get_ident()

    def __enter__(self) -> RoundTrips:
        from redis.connection import AbstractConnection

        self._class, self._send = AbstractConnection, AbstractConnection.send_packed_command
        send, trips = self._send, self

        def counted(conn, command, check_health=True):  # type: ignore[no-untyped-def]
            if threading.get_ident() == trips._thread:
                trips.count += 1
            return send(conn, command, check_health)

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._class.send_packed_command = self._send  # type: ignore[method-assign]


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
