"""Where a URL's next step is published, and the one call that hands a URL on.

A step that hands a URL to another (a fetched page to its parse or render, a render retried,
a lost URL taken back) marks the URL's stage in the ledger, then publishes the task: the mark
first, because the task may start before the publish returns and must find it (as arq's
``enqueue_job`` writes the job's record and its queue entry together). :meth:`Publisher.hand_off`
is that pair, written once.

A :class:`Publisher` is the one object the steps and the dispatcher publish through: the
broker's queues in a worker (tasks.CeleryPublisher), a deque in the in-process test driver.
"""

from __future__ import annotations

import contextlib
from enum import Enum

from ...state.store import CrawlStore


class Stage(Enum):
    """A stage a URL is handed on to (the ledger's stage marks "q" and "v")."""

    PARSE = "q"
    RENDER = "v"


class Publisher:
    """Publishes the tasks of released, fetched and taken-back URLs (small JSON arguments)."""

    def fetch(self, crawl_id: str, items: list[tuple[str, int]], queue: str) -> None:
        """One fetch message for ``(url, depth)`` items released together, to ``queue``."""
        raise NotImplementedError

    def together(self) -> contextlib.AbstractContextManager[None]:
        """A block whose fetch messages (this thread's) go to the broker together at its end,
        in one round trip where the broker allows: a release round's (issue 32: one LPUSH
        each was ~0.4 round trips a page)."""
        return contextlib.nullcontext()

    def parse(self, crawl_id: str, url: str, depth: int) -> None:
        raise NotImplementedError

    def render(self, crawl_id: str, url: str, depth: int) -> None:
        raise RuntimeError("this process cannot publish render tasks")

    def hand_off(self, store: CrawlStore, url: str, depth: int, stage: Stage) -> None:
        """Mark ``url`` queued for ``stage``, then publish its task."""
        if stage is Stage.RENDER:
            store.ledger.mark_render_queued(url)
            self.render(store.id, url, depth)
        else:
            store.ledger.mark_parse_queued(url)
            self.parse(store.id, url, depth)
