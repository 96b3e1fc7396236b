"""The Celery application (found by ``celery -A crawler_tasks``).

Configured for a crawler on the Redis broker: JSON only, late acks (a parse or render task
whose worker dies is redelivered; a fetch message is held in its process only and a dead
process's URLs are taken back by the crawl's reclaim, broker.py; every task is idempotent),
one prefetched message per process, queues drained strictly in the order given to ``-Q``,
no result backend (nothing waits on task results), and task events on for Flower. Workers
outlive Redis restarts, outages and ``maxmemory``: they reconnect for ever, running tasks
wait for Redis (tasks.py) and acks survive a full Redis (broker.py).
"""

from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue

from ...settings import Settings, load
from ...state.connection import is_cluster, node_urls

# The queues' names are queues.py's (the crawler's one view of the broker).
from .queues import FETCH_QUEUES as FETCH_QUEUES
from .queues import QUEUES as QUEUES
from .queues import RENDER_QUEUE as RENDER_QUEUE
from .queues import direct_queue as direct_queue


def broker_transport(url: str) -> str | None:
    """Our Redis transport (survives ``maxmemory``, see broker.py) for plain Redis URLs; TLS
    (``rediss://``) and other brokers keep kombu's choice."""
    scheme = url.split("://", 1)[0].lower()
    return "crawler_tasks.worker.process.broker:Transport" if scheme == "redis" else None


def make_app(settings: Settings | None = None) -> Celery:
    settings = settings or load()
    app = Celery("crawler_tasks")
    app.conf.update(
        broker_url=settings.broker_url,
        broker_transport=broker_transport(settings.broker_url),
        broker_connection_retry_on_startup=True,
        # Reconnect for ever (every 2 s, growing to 30 s): a worker outlives any Redis outage.
        broker_connection_max_retries=None,
        # A task running when the broker connection drops goes on: it waits for Redis
        # (tasks.patiently) and is acknowledged once Redis is back; its message is redelivered
        # only if that ack fails (every task is idempotent).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_transport_options={
            "queue_order_strategy": "priority",
            "visibility_timeout": settings.visibility_timeout,
            # Look for messages of dead workers every few seconds, not every 100 s (kombu's
            # default 10 s x throttle 10), so they come back soon after visibility_timeout.
            "unacked_restore_interval": max(1, min(10, settings.visibility_timeout // 4)),
            "unacked_restore_throttle": 1,
            # A broker link that stops answering fails within this, not never (a silent
            # partition); above the 1 s BRPOP the consumer polls with.
            "socket_timeout": settings.redis_timeout,
            "socket_connect_timeout": settings.redis_timeout,
        },
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        # The (disabled, stateless) result backend once per process, not once per thread:
        # Celery resolves it per thread by scanning the installed packages' entry points,
        # ~3.5 ms each, ~1 s of CPU per 256-thread fetch process during its first pages.
        result_backend_thread_safe=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        # Task events cost a Redis PUBLISH each, ~10 % of a fetch worker's CPU per page
        # (bench/broad.py --events): workers send them when started with -E (the Procfile,
        # compose and README do, for Flower).
        worker_send_task_events=False,
        task_send_sent_event=settings.task_events,
        task_queues=[
            Queue(name, Exchange(name, type="direct"), routing_key=name)
            for name in (*QUEUES, RENDER_QUEUE)
        ],
        task_default_queue="crawl.high",
        task_routes={"crawl.parse": {"queue": "parse"}, "crawl.render": {"queue": RENDER_QUEUE}},
        worker_hijack_root_logger=False,
        beat_scheduler="redbeat.RedBeatScheduler",
        # RedBeat takes one URL: the first of several startup nodes (state/connection.py).
        redbeat_redis_url=node_urls(settings.state_url)[0],
        redbeat_key_prefix=f"{settings.key_prefix}:redbeat",
        redbeat_lock_timeout=60,
        beat_max_loop_interval=5,
    )
    if is_cluster(settings.state_url):
        # RedBeat on the crawl-state cluster (its own RedisCluster client, strings as its other
        # clients have them): its entries, schedule zset and lock are single keys, its
        # pipelines not transactions, all of which a cluster routes by key.
        app.conf.redbeat_redis_options = {"cluster": True, "decode_responses": True}
    app.conf.crawler_settings = settings
    return app


def _app() -> Celery:
    """The app of ``celery -A crawler_tasks``. A bad ``CRAWLER_*`` value must not fail the
    import: the CLI reports it in one line (exit 2), a worker or beat refuses to start with it
    (worker/lifecycle.py)."""
    try:
        return make_app()
    except ValueError as exc:
        bad = make_app(load(env={}))
        bad.conf.crawler_settings_error = str(exc)
        return bad


app = _app()
