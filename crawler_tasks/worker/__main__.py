"""``python -m crawler_tasks.worker [options]``: the worker ``celery -A crawler_tasks worker
[options]`` starts (the same app, options, bootsteps and ``CELERY_WORKER_*`` variables), for
the worker processes this package starts itself (surface/embedded.py: ``crawler crawl``,
``make demo``, the tests).

Why not ``celery`` itself: its umbrella command loads every installed plugin command before it
parses anything (flower and its tornado, click-repl and its prompt_toolkit), a quarter of a
worker's start-up CPU (~0.25 of ~0.9 CPU-s), paid by each local worker started. Operators'
workers (Procfile, compose file) still run ``celery -A crawler_tasks worker``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: Seconds a worker whose command died has for its warm shutdown (the SIGTERM of its
#: parent-death signal, surface/embedded.py) before its process group is killed: the grace
#: ``stop_process`` gives it while the command lives.
PARENT_GONE_GRACE = 10.0


def _leave_with_parent(parent: int, grace: float) -> None:
    """Kill this worker's process group (it and its pool processes) ``grace`` seconds after
    the process that started it died. The parent-death SIGTERM begins a warm shutdown, which
    waits for running tasks; an embedded crawl's Redis dies with the command, so a task or
    Celery's own broker connection can wait on it far longer (a worker outlived its SIGKILLed
    command by more than 30 s in CI)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    time.sleep(grace)
    if os.getpgid(0) == os.getpid():  # its own group (start_new_session): its pool too
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker

    from .tasks import app

    watch = threading.Thread(
        target=_leave_with_parent,
        args=(os.getppid(), PARENT_GONE_GRACE),
        name="crawler-parent-watch",
        daemon=True,
    )
    watch.start()
    # What the umbrella command's group hands its ``worker`` command: the app (ours has no
    # user options to add), colours and quiet at their defaults.
    worker.main(
        args=sys.argv[1:] if argv is None else argv,
        obj=CLIContext(app=app, no_color=None, workdir=None),
        prog_name="celery worker",
        auto_envvar_prefix="CELERY_WORKER",
    )


if __name__ == "__main__":
    main()
