"""What happens to one URL, as plain functions the Celery tasks call.

    released by the dispatcher ──> fetch_url ──(HTML)──> parse_url ──> recorder.finalize
                                       ├──(HTML to render)──> render_url ──> recorder.finalize
                                       └──(anything else)────────────> recorder.finalize

``fetch_url``: the fetch step decides (fetch_step.py), one settle step returns the host's
lease and finalizes or requeues (settle.py); ``parse_url``: the parse step (parse_step.py).

Every step is idempotent under redelivery: a URL is "in flight" exactly while it has an entry
in the crawl's inflight hash, and ``finalize`` (finish.lua) removes that entry once. A step
that finds no entry is a duplicate delivery and does nothing.

Retryable failures do not sleep and do not use Celery countdowns: the URL goes back to the
frontier with a due time (exponential back-off with jitter), so the retry also waits for the
domain's rate, lease and Retry-After like any other request. After ``max_retries`` retries the
URL is final with the last failure's reason and its ``attempts``.

An unexpected exception (a bug) while handling a URL gives it the final state
``internal_error`` instead of leaving it in flight forever (its lease returned as an error on
the way out of the fetch step's ``with``); only a Redis outage is raised, for the task's own
retry (whose rerun returns the lease).

While Redis is nearly full (``maxmemory``), a page waits for room before its links are
admitted (worker/runtime/room.py); after ``admission_wait`` its URL is handed back to the frontier,
to be fetched again, without spending a retry.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from ...errors import AdmissionPaused, OutputUnavailable
from ...state.formats import Begun
from ...state.status import OUTPUT_PAUSE
from ..process import faults
from ..process.outage import REDIS_UNAVAILABLE
from ..runtime.context import Context
from . import fetch_step, parse_step, render_step
from .outcome import Final
from .parse_step import item_task_failed
from .recorder import finalize, output_failed
from .settle import requeue, settle
from .trip import Visit

__all__ = ["begin", "fetch_url", "item_task_failed", "parse_url", "render_url"]

log = logging.getLogger(__name__)

#: Errors left to the Celery task's own retry (tasks.py): the URL's state cannot be written now.
INFRA_ERRORS = REDIS_UNAVAILABLE  # never a URL's fault: the task waits (tasks.patiently)

Step = Callable[[Visit], str]


def fetch_url(
    ctx: Context, crawl_id: str, url: str, depth: int, begun: dict[str, Begun] | None = None
) -> str:
    """Fetch one released URL; returns what happened (for logs and tests). ``begun``: what
    :func:`begin` said of it, used once (a run again after a Redis outage asks again)."""
    faults.point("before_start")  # the fault suite: a message taken, then lost with its taker
    started = begun.pop(url, None) if begun else None
    return _guarded(ctx, crawl_id, url, depth, functools.partial(_fetch, begun=started))


def _fetch(visit: Visit, begun: Begun | None) -> str:
    """The fetch step decides under the host's lease; one settle step returns it and carries
    the decision out (settle.py)."""
    with visit.store.politeness.lease(visit.url, visit.domain, keep_on=INFRA_ERRORS) as lease:
        return settle(visit, fetch_step.decide(visit, begun), lease)


def begin(ctx: Context, crawl_id: str, urls: list[str]) -> dict[str, Begun]:
    """start.lua for the URLs of one message at once (one round trip per partition), for
    :func:`fetch_url`; {} when that cannot be said here, so each URL asks on its own."""
    faults.point("before_start")
    store = ctx.store(crawl_id)
    if store is None:
        return {}
    try:
        return store.ledger.start_many(urls, ctx.worker_id)
    except INFRA_ERRORS:
        raise
    except Exception:  # a bug: each URL's own start gets its own internal_error path
        log.exception("crawl %s: starting %d URLs together failed", crawl_id, len(urls))
        return {}


def parse_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    return _guarded(ctx, crawl_id, url, depth, parse_step.parse_url, parse=True)


def render_url(ctx: Context, crawl_id: str, url: str, depth: int) -> str:
    """A fetched page rendered by a browser, then parsed (render_step.py)."""
    return _guarded(ctx, crawl_id, url, depth, render_step.render_url, parse=True)


def _guarded(
    ctx: Context, crawl_id: str, url: str, depth: int, step: Step, *, parse: bool = False
) -> str:
    """Run one step of a URL, on its visit built from the task's arguments. A bug gives the
    URL its final state (internal_error) instead of leaving it in flight; Redis being away is
    the task's to wait out (tasks.patiently)."""
    visit = Visit.of(ctx, crawl_id, url, depth)
    if visit is None:  # the crawl's options are gone: nothing of it is in flight here
        return "duplicate"
    try:
        return step(visit)
    except INFRA_ERRORS:
        raise
    except AdmissionPaused:
        return _hand_back(visit, parse=parse)
    except OutputUnavailable as exc:  # the disk's fault, not the URL's: fetched again later
        output_failed(ctx, visit.store, exc)
        # Due at the output's next probe, not at once: as a disk fills, a smaller record that
        # still fits ends the pause, and the URL was fetched again at once, and again (3
        # requests of one URL in 0.3 s, issue 50); the probe, not a page, finds room.
        return _hand_back(visit, parse=parse, delay=OUTPUT_PAUSE)
    except Exception as exc:  # a bug: the URL's final state says so, the log has the traceback
        log.exception("crawl %s: internal error on %.300s", crawl_id, url)
        return finalize(visit, Final.internal(url, depth, exc))


def _hand_back(visit: Visit, *, parse: bool, delay: float = 0.0) -> str:
    """Redis had no room for the page's links for ``admission_wait`` s, or the output disk
    none for its WARC record: nothing of the page was written, its lease is returned (the
    fetch step's ``with``), so its URL goes back to the frontier as it was, its retries
    untouched (the dispatcher releases nothing until there is room)."""
    if parse:
        visit.store.bodies.drop(visit.url)  # fetched again: its stored body only takes the room
    return requeue(visit, delay)
