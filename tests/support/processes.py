"""Stopping the worker processes a test started."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterable

from crawler_tasks.surface.embedded import stop_process


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
