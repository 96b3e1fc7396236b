"""One URL's trip through the steps, as one value: :class:`Visit`.

A task's message stays small JSON (crawl id, URL, depth: tasks.py); the task builds the Visit
from it in the worker, once (:meth:`Visit.of`: the crawl's store and runtime from this
process's cache, looked up together), and every step takes it instead of four to six loose
arguments. A value apart from the worker that runs it, as arq's ``jobs.py`` keeps a job's
values apart from its worker: a step reads what it needs of it and returns what it decided
(outcome.py); nothing in it is written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...state.store import CrawlStore
from ..runtime.context import Context
from ..runtime.crawl_runtime import CrawlRuntime


@dataclass(frozen=True, slots=True)
class Visit:
    """One URL of one crawl, in this process."""

    #: This process's context: Redis, the fetcher, the room, the publisher, the browser.
    ctx: Context
    #: The crawl's state in Redis, and what the crawl needs of this process beside it
    #: (fetching as the crawl asks, robots.txt, output files), built together.
    store: CrawlStore
    runtime: CrawlRuntime
    url: str
    depth: int
    #: The URL's host as the crawl's politeness keys it (its lease, its queue, its gates),
    #: computed once with the visit (:meth:`of`, :meth:`at`).
    domain: str
    #: What the fetch learnt of the response, for a parse or a render (respond.response_meta;
    #: stored with the body for a parse task): status, final URL, headers, counters.
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, ctx: Context, crawl_id: str, url: str, depth: int) -> Visit | None:
        """The visit a task's arguments name; None for a crawl whose options are gone."""
        crawl = ctx.crawl(crawl_id)
        if crawl is None:
            return None
        store, runtime = crawl
        return cls(ctx, store, runtime, url, depth, store.domain_of(url))

    @classmethod
    def at(cls, ctx: Context, store: CrawlStore, url: str, depth: int) -> Visit:
        """The visit of a URL met by a holder of its crawl's store (the dispatcher's repair
        and cancel paths, a dead host's pending URLs)."""
        return cls(ctx, store, ctx.crawl_runtime(store), url, depth, store.domain_of(url))
