"""crawler_tasks: a distributed, polite, exact web crawler on Celery and Redis.

``celery -A crawler_tasks worker`` finds :data:`app`; ``start_crawl`` starts a crawl from any
Python shell that can reach the same Redis.
"""

from typing import Any

from .state import events as _events
from .surface.crawl import Crawl, list_crawls, start_crawl


def __getattr__(name: str) -> Any:
    """``app`` on first use (Celery's ``-A crawler_tasks``, a user's ``from crawler_tasks
    import app``), with the crawler's tasks registered: a ``crawler`` command that only talks
    to Redis starts without importing the worker (a third of its start-up). The event signals
    (``crawl_finished``...) likewise: made on first use (state/events.py)."""
    if name == "app":
        from .worker import tasks as _tasks  # noqa: F401  (registers crawl.fetch, crawl.parse)
        from .worker.process.app import app

        return app
    if name in _events.SIGNALS:
        return _events.signal(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "app",
    "Crawl",
    "start_crawl",
    "list_crawls",
    "crawl_finished",
    "request_started",
    "request_completed",
    "request_failed",
]
__version__ = "0.1.0"
