"""Crawl events, delivered two ways:

* as Celery signals inside the worker that produced them (``request_started``,
  ``request_completed``, ``request_failed``, ``crawl_finished``): connect a receiver in your
  worker code, e.g. ``@crawl_finished.connect``;
* as JSON messages on the crawl's Redis pub/sub channel, which ``Crawl.events()`` iterates.

Pub/sub delivers only to listeners connected at the time: it is a live feed, not a log; the
exact record of a crawl is its output files and its counters. So per-URL events are published
only while the channel has a listener (``PUBSUB NUMSUB``, asked at most once per
``LISTENERS_TTL`` seconds per channel and process): a listener that subscribes mid-crawl may
miss up to that much of the feed. ``crawl_finished`` is always published.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import redis

from .connection import subscribers
from .keys import CrawlKeys

#: Seconds a process trusts its last count of a channel's listeners.
LISTENERS_TTL = 1.0
#: channel -> (monotonic time the count expires, listeners)
_listeners: dict[str, tuple[float, int]] = {}
_asking = threading.Lock()

#: Each signal's arguments. The signals themselves are made on first use (``signal``): Celery's
#: dispatch module brings kombu with it, a third of a ``crawler`` command's start-up, and a
#: command that only reads Redis never needs them.
SIGNALS = {
    "request_started": {"crawl_id", "url"},
    "request_completed": {"crawl_id", "url", "record"},
    "request_failed": {"crawl_id", "url", "record"},
    "crawl_finished": {"crawl_id", "summary"},
}
_signals: dict[str, Any] = {}
_making = threading.Lock()


def signal(event: str) -> Any:
    """The Celery signal of ``event`` (``request_started``...), made once per process."""
    found = _signals.get(event)
    if found is None:
        from celery.utils.dispatch import Signal

        with _making:
            found = _signals.setdefault(event, Signal(name=event, providing_args=SIGNALS[event]))
    return found


def __getattr__(name: str) -> Any:
    """``events.crawl_finished`` and the others, as module attributes (the public API)."""
    if name in SIGNALS:
        return signal(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def emit(client: redis.Redis, ck: CrawlKeys, event: str, crawl_id: str, **data: Any) -> None:
    """Send the signal in this process, then publish the event on the crawl's channel. A
    signal nobody has asked for yet has no receiver: nothing to send."""
    made = _signals.get(event)
    if made is not None:
        made.send(sender=event, crawl_id=crawl_id, **data)
    if event != "crawl_finished" and not _has_listeners(client, ck.events):
        return
    payload = {"event": event, "crawl_id": crawl_id, "ts": time.time(), **data}
    client.publish(ck.events, json.dumps(payload, default=str))


def _has_listeners(client: redis.Redis, channel: str) -> bool:
    now = time.monotonic()
    expires, n = _listeners.get(channel, (0.0, 0))
    if now >= expires:
        # One thread asks again, the others keep the last count meanwhile: every thread of
        # a pool found it expired at once and each asked, 0.13 round trips per page (issue
        # 32). A channel never counted is asked by every thread that meets it, as before.
        with _asking:
            expires, n = _listeners.get(channel, (0.0, -1))
            ask = now >= expires
            if ask and n >= 0:
                _listeners[channel] = (now + LISTENERS_TTL, n)
        if ask:
            n = subscribers(client, channel)
            if len(_listeners) > 1000:
                _listeners.clear()
            _listeners[channel] = (now + LISTENERS_TTL, n)
    return n > 0


#: Operators' actions kept per crawl (its action log, shown on the dashboard's crawl page).
ACTIONS_KEPT = 200


def action(
    client: redis.Redis, ck: CrawlKeys, scripts: Any, crawl_id: str, name: str, **data: Any
) -> dict[str, Any]:
    """An operator's action on the crawl (``name``: pause, resume, cancel, retry_failed,
    set_rate): kept in its action log and published as an ``action`` event, always (unlike
    per-URL events: it is rare and a person wants to see it). Returns the event."""
    event = {"event": "action", "action": name, "crawl_id": crawl_id, "ts": time.time(), **data}
    payload = json.dumps(event, default=str)
    scripts.action(keys=[ck.actions], args=[payload, ACTIONS_KEPT, ck.events], client=client)
    return event


def actions(client: redis.Redis, ck: CrawlKeys, last: int = 50) -> list[dict[str, Any]]:
    """The newest ``last`` actions of the crawl's log, newest first."""
    return [json.loads(raw) for raw in reversed(client.lrange(ck.actions, -last, -1))]
