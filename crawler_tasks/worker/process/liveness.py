"""What this process tells the cluster about itself besides "alive": the fetch messages it
has received and not finished (its heartbeat writes them, see ``state.workers.Heartbeat``);
and what it tells itself: whether its pool has room (settle.py).

A released URL whose message nobody has begun while every fetch queue is empty looks like a
message lost with a dead worker (the dispatcher's reclaim); under overload it is usually a
message waiting in a living process's thread pool. Celery keeps the messages a worker has
received and not acknowledged in ``celery.worker.state.reserved_requests``; this reads the
crawl's URLs out of them.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from celery.worker import state as worker_state

#: The task names whose messages carry released URLs.
FETCH_TASKS = {"crawl.fetch", "crawl.fetch_many"}


def received_fetches() -> list[str]:
    """ "crawl<TAB>url" of every fetch message this process holds (empty outside a worker)."""
    for _ in range(3):  # the consumer thread may add one while we copy: try again
        try:
            requests = list(worker_state.reserved_requests)
            break
        except RuntimeError:
            continue
    else:
        return []
    out: list[str] = []
    for request in requests:
        if getattr(request, "name", None) in FETCH_TASKS:
            out.extend(fetch_urls(request.args))
    return out


def pool_has_room() -> bool:
    """Does this process run fewer tasks than half its pool's slots (the worker's
    concurrency, lifecycle._after_setup; False outside a worker)? Then a host's lease, not
    this process, is what its next URL waits for (settle.py). A broad crawl keeps a fetch
    pool full (250 of 256 in bench/broad.py); a crawl of one host at concurrency 16, not (5 of
    256: bench/crawl.py)."""
    slots = current_app.conf.get("crawler_pool_slots")
    return bool(slots) and len(worker_state.active_requests) < slots // 2


def fetch_urls(args: Any) -> list[str]:
    """ "crawl<TAB>url" of a fetch task's arguments: crawl.fetch(crawl_id, url, depth) or
    crawl.fetch_many(crawl_id, [[url, depth], ...])."""
    try:
        crawl_id, rest = args[0], args[1]
        if isinstance(rest, str):
            return [f"{crawl_id}\t{rest}"]
        return [f"{crawl_id}\t{item[0]}" for item in rest]
    except (IndexError, KeyError, TypeError):
        return []
