"""The last step of every URL: record its final state once, and finish the crawl when it was
the last one.

:func:`finalize` is the only place a URL leaves flight (finish.lua removes its inflight entry
exactly once, so a duplicate delivery changes nothing), writes its page and edge records and
emits its event. The call that brings the crawl's outstanding counter to zero runs
:func:`crawl_finished`: validators of a recrawl, ``summary.json``, key expiry, the
``crawl_finished`` event and the owner's ``on_finished`` task. Used by the pipeline and by the
dispatcher (to drain a cancelled crawl).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import CrawlerError, InternalError
from ..state import events, formats
from ..state.admission import RedirectClaims
from ..state.formats import Counter
from ..state.store import CrawlStore
from .context import Context
from .output import write_summary

log = logging.getLogger(__name__)

DEAD_LETTER_FIELDS = ("url", "depth", "error", "status", "detail", "attempts", "fetched_at")


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

    def note_change(self, kind: str | None) -> None:
        if kind is not None:
            self.extra["change"] = kind
            self.counters[formats.change(kind)] = 1

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
        error = formats.Outcome.CANCELLED.value
        return cls(url, depth, error=error, counters={Counter.CANCELLED.value: 1})

    @classmethod
    def internal(cls, url: str, depth: int, exc: Exception) -> Final:
        return cls.failed(url, depth, InternalError(f"{type(exc).__name__}: {exc}"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def finalize(ctx: Context, store: CrawlStore, final: Final) -> str:
    """Record a URL's final state once; the call that empties the crawl finishes it."""
    counters = dict(final.counters)
    counters[Counter.DONE.value] = 1
    record = final.record()
    failed = Counter.FAILED.value in counters
    if failed:
        # Before finish: a dead letter for a URL that then turns out final already is harmless.
        store.ledger.dead_letter(final.url, {k: record.get(k) for k in DEAD_LETTER_FIELDS})
    left = store.ledger.finish(final.url, counters)
    if left < 0:
        return "duplicate"
    if final.extra.get("redirects") and not failed:
        RedirectClaims.release(store.client, store.ck, final.url)
    out = ctx.output(store.opts)
    out.page(record)
    out.edges(final.url, final.outlinks)
    kind = "request_failed" if final.error else "request_completed"
    payload = {k: record[k] for k in ("url", "status", "error", "depth")}
    events.emit(store.client, store.ck, kind, store.id, record=payload)
    if left == 0:
        crawl_finished(ctx, store)
    return final.error or "done"


def crawl_finished(ctx: Context, store: CrawlStore) -> None:
    """Runs once per crawl, in the worker whose finish.lua emptied it."""
    opts, ck, client = store.opts, store.ck, store.client
    if store.recrawl is not None:
        client.hset(ck.stats, formats.change("gone"), store.recrawl.gone())
    summary = store.ledger.summary()
    directory = f"{opts.output or ctx.settings.output_dir}/{opts.crawl_id}"
    path = write_summary(directory, summary)
    client.hset(ck.state, "summary_path", str(path))
    for key in client.scan_iter(match=f"{ck.base}:*", count=1000):
        client.expire(key, ctx.settings.finished_ttl)
    events.emit(client, ck, "crawl_finished", opts.crawl_id, summary=summary)
    if opts.on_finished:
        ctx.on_finished(opts.on_finished, opts.crawl_id, summary)
    log.info("crawl %s %s in %.1fs", opts.crawl_id, summary["status"], summary["duration_s"])
