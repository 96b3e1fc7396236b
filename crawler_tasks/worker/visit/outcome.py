"""What a step of a URL returns, for the one step that carries it out (settle.py, recorder.py).

:class:`Final` is a URL's final state (its output record and the counters it adds); a
:class:`Decision` is what the fetch step (or the repair of a lost URL) decided: what becomes
of the URL, how its host's lease ends, and what is to be written of what it found (a
response, a sitemap file, a page not due, an origin's sitemaps). The deciding step only
builds these; ``settle`` returns the lease once and writes, ``recorder.finalize`` records once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ...errors import CrawlerError, InternalError
from ...state import formats
from ...state.crawl_state import Note
from ...state.formats import Counter, LeaseEnd
from ...state.pacing import NO_ANSWER, Answer
from ...state.validators import Seen, change_counters
from ...web.fetcher import Response
from ..output.files import ITEMS


@dataclass
class Final:
    """The final state of one URL: its output record and the counters it adds."""

    url: str
    depth: int
    error: str | None = None
    status: int | None = None
    final_url: str | None = None
    content_type: str | None = None
    title: str | None = None
    outlinks: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: False for a URL robots.txt refuses: counted, no line in the output. Links to it that
    #: admission could judge never became URLs at all (admission.py); the rest must look alike.
    recorded: bool = True

    def record(self) -> dict[str, Any]:
        rest = {k: v for k, v in self.extra.items() if k != "fetched_at"}
        return {
            "url": self.url,
            "final_url": self.final_url or self.url,
            "status": self.status,
            "depth": self.depth,
            "content_type": self.content_type,
            "title": self.title,
            "fetched_at": self.extra.get("fetched_at"),
            "error": self.error,
            "outlinks": self.outlinks,
            **rest,
        }

    def add_items(self, items: list[dict[str, Any]], error: str | None) -> None:
        """The extraction hook's items (written with the record: output.py) or its error."""
        self.extra["items"] = len(items)
        self.extra[ITEMS] = items
        self.counters[Counter.ITEMS.value] = len(items)
        if error is not None:
            self.extra["extract_error"] = error
            self.counters[Counter.EXTRACT_ERRORS.value] = 1

    def note_change(self, kind: str | None) -> None:
        if kind is not None:
            self.extra["change"] = kind
            self.counters.update(change_counters(kind))  # revisit figures: issue 35

    @classmethod
    def failed(cls, url: str, depth: int, exc: CrawlerError) -> Final:
        details = exc.details
        status = getattr(exc, "status", None) or details.get("status")
        final = cls(
            url,
            depth,
            error=exc.reason,
            status=status if isinstance(status, int) else None,
            final_url=_text(details.get("final_url")),
            content_type=_text(details.get("content_type")),
            extra={"detail": str(exc)[:500], "fetched_at": time.time()},
            counters={Counter.FAILED.value: 1, formats.failed(exc.reason): 1},
        )
        redirects = details.get("redirects")
        if isinstance(redirects, list) and redirects:
            final.extra["redirects"] = [target for _, target in redirects]
        return final

    @classmethod
    def cancelled(cls, url: str, depth: int) -> Final:
        """A URL in flight when its crawl was cancelled, stopped before its request: counted,
        no line in the output, as the pending URLs cancel.lua counts in bulk."""
        error = formats.Outcome.CANCELLED.value
        counters = {Counter.CANCELLED.value: 1}
        return cls(url, depth, error=error, counters=counters, recorded=False)

    @classmethod
    def internal(cls, url: str, depth: int, exc: Exception) -> Final:
        return cls.failed(url, depth, InternalError(f"{type(exc).__name__}: {exc}"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class Next(Enum):
    """What becomes of a URL once its lease is returned."""

    DUPLICATE = "duplicate"  # not this task's (start.lua): nothing to do, no lease to return
    RECOVER = "recover"  # final already, its record unwritten: write it (no lease)
    FINAL = "final"  # record ``final``
    RETRY = "retry"  # back to the frontier after a back-off, or final after max_retries
    REQUEUE = "requeue"  # back to the frontier now, no retry spent
    UNREACHABLE = "unreachable"  # no connection: the host's circuit breaker decides (done.lua)
    RESPONSE = "response"  # a page's ``response``: recorded, parsed or handed on (respond.py)
    SITEMAP = "sitemap"  # a sitemap file's ``response``: its URLs admitted (sitemap_seeds.py)
    NOT_DUE = "not_due"  # ``final``, a page not due: its last links admitted (adaptive.py)


@dataclass
class Decision:
    """What the fetch step (or the repair of a lost URL) decided for one URL, for ``settle``
    to carry out: how its lease ends (a refund included: done.lua runs once per lease), then
    what becomes of the URL, and what is written of what the step found. Values only: what
    they become is written by ``settle`` (and the steps it calls), once, whatever the branch."""

    next: Next
    #: How the lease ends (None: the URL is not this task's, its lease is not ours either).
    lease: LeaseEnd | None = LeaseEnd.OK
    final: Final | None = None
    error: CrawlerError | None = None
    #: Retry-After seconds for the lease (a throttled host), and when the request was sent
    #: (time.monotonic(); None: unknown, or not to pace from: the lease ends from now).
    retry_after: float = 0.0
    sent_at: float | None = None
    #: The response's address and latency, for the host's address group and AutoThrottle.
    answer: Answer = NO_ANSWER
    #: RESPONSE, SITEMAP: the response, what it becomes is written by ``settle``. (A value,
    #: not a closure: nothing it holds refers back to the decision, whose cycle would leave
    #: the response and its body for the garbage collector: test_carried_admission.)
    response: Response | None = None
    #: The host's next URL waits for this lease (start.lua): it goes back before the
    #: response's records (settle.py).
    awaited: bool = False
    #: NOT_DUE: what the schedule remembers of the page, marked seen by this run by ``settle``.
    seen: Seen | None = None
    #: An origin's robots.txt ``Sitemap:`` URLs, the first time this process read them for
    #: the crawl (the ``sitemaps`` option): (origin, URLs), admitted by ``settle`` whatever
    #: becomes of this URL (sitemap_seeds.discover).
    sitemaps: tuple[str, list[str]] | None = None
    #: Crawl-wide counters the step found (a retried status: the retry's record will not
    #: carry it), and first notes of the crawl's state (``status``, the summary): field ->
    #: text, written by ``settle`` (the step only decides).
    counters: dict[str, int] = field(default_factory=dict)
    notes: dict[Note, str] = field(default_factory=dict)

    @classmethod
    def record(cls, final: Final, lease: LeaseEnd = LeaseEnd.OK) -> Decision:
        return cls(Next.FINAL, lease, final=final)

    @classmethod
    def retry(cls, exc: CrawlerError, lease: LeaseEnd = LeaseEnd.ERROR) -> Decision:
        return cls(Next.RETRY, lease, error=exc)
