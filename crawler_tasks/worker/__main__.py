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

import sys


def main(argv: list[str] | None = None) -> None:
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker

    from .tasks import app

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
