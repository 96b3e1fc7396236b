"""crawler_tasks: a distributed, polite, exact web crawler on Celery and Redis.

``celery -A crawler_tasks worker`` finds :data:`app`; ``start_crawl`` starts a crawl from any
Python shell that can reach the same Redis.
"""

from .state.events import crawl_finished, request_completed, request_failed, request_started
from .surface.crawl import Crawl, list_crawls, start_crawl
from .worker import tasks as _tasks  # noqa: F401  (registers crawl.fetch and crawl.parse)
from .worker.app import app

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
