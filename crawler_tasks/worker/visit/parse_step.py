"""The parse step of one fetched HTML page: its record fields, its links admitted (or its
canonical URL instead), its extraction hook's items sent on.

A page parsed here was fetched by this same task (small bodies, respond.py) or by an
earlier fetch task that left its body in Redis (``store.bodies``) and published this parse.
While Redis is nearly full (``maxmemory``), a page waits for room before anything of it is
written (worker/runtime/room.py); after ``admission_wait`` the wait raises AdmissionPaused and the
URL is handed back to the frontier (pipeline.py), no retry spent.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ...state import formats
from ...state.formats import Counter, Outcome, Started
from ...state.neardup import NearDuplicates
from ...state.scripts import Carried
from ...web.page import ParsedHTML, extract
from ..runtime import hooks
from ..runtime.context import Context
from .outcome import Final
from .recorder import finalize, recover
from .trip import Visit

log = logging.getLogger(__name__)

#: Items per on_item task message.
ITEM_BATCH = 100


def take_stored(visit: Visit, stage: str) -> tuple[Visit, bytes] | str:
    """Begin a deferred stage of the visit's URL (parse "p", render "w"): the visit with its
    response's meta, and its body (stored by the fetch task), or the task's outcome when
    there is nothing more to do (a duplicate delivery, a record to recover, a body lost with
    Redis)."""
    store, url = visit.store, visit.url
    started = store.ledger.start(url, visit.ctx.worker_id, stage)
    if started == Started.DUPLICATE:
        return "duplicate"
    if started == Started.UNRECORDED:
        return recover(visit)
    stored = store.bodies.get(url)
    if stored is None:
        lost = Final(
            url, visit.depth, error=Outcome.BODY_LOST.value, counters={Counter.FAILED.value: 1}
        )
        return finalize(visit, lost)
    meta, body = stored
    return replace(visit, meta=meta), body


def parse_url(visit: Visit) -> str:
    """Parse the stored body of the visit's URL, fetched by an earlier task; record the page."""
    got = take_stored(visit, "p")
    if isinstance(got, str):
        return got
    page, body = got
    result = finalize(page, parsed(page, body))
    visit.store.bodies.drop(visit.url)
    return result


def parsed(visit: Visit, body: bytes, later: Carried | None = None) -> Final:
    """The page's final state from its body and the visit's ``meta``, its links admitted
    (``later``: those admit.lua calls that can wait are left there, for the caller to send
    before the URL's finish: respond.py)."""
    store, url, depth, meta = visit.store, visit.url, visit.depth, visit.meta
    opts = store.opts
    page = extract(
        body,
        meta["final_url"],
        content_type=meta.get("content_type_header"),
        headers=meta.get("headers") or {},
        max_links=opts.max_links_per_page,
        max_url_length=opts.max_url_length,
        honour_nofollow=opts.honour_nofollow,
        keep_tree=bool(opts.extract),
        fingerprint=opts.near_duplicates or opts.skip_near_duplicates,
    )
    final = Final(
        url,
        depth,
        status=meta["status"],
        final_url=meta["final_url"],
        content_type=meta.get("content_type"),
        title=page.title,
        extra={
            **meta["extra"],
            "description": page.description,
            "language": page.language,
            "canonical": page.canonical,
            "text_length": page.text_length,
            "noindex": page.noindex,
            "rendered": bool(meta.get("rendered")),
        },
        counters={**meta["counters"], Counter.PARSED.value: 1},
    )
    _follow(visit, final, page, later)
    for reason, n in page.links_dropped.items():
        if n:
            final.counters[formats.links_dropped(reason)] = n
    if store.recrawl is not None:
        headers = meta.get("headers") or {}
        final.note_change(store.recrawl.remember(url, headers, body, page.links))
    return final


def _follow(visit: Visit, final: Final, page: ParsedHTML, later: Carried | None = None) -> None:
    """What the page leads to: its canonical URL instead of its links (``canonical``), or
    its links (as the hook changed them, none for a skipped near-duplicate), admitted."""
    store, url, depth = visit.store, visit.url, visit.depth
    opts = store.opts
    visit.ctx.room.wait()  # before anything of the page is written (hook items, fingerprint, links)
    # Its canonical URL instead of this page, when it names another URL.
    alias = page.canonical if opts.canonical else None
    if alias is not None and alias != (final.final_url or url):
        final.extra["canonical_followed"] = True
        final.outlinks = [alias]
        final.counters.update(store.admission.links([alias], depth))
        return
    links = page.links
    if opts.extract:
        hooked = _hook(visit, page)
        final.add_items(hooked.items, hooked.error)
        links = hooked.links
    if page.simhash is not None:
        # Through admission's client: a fingerprint refused for memory waits in place (room.py).
        original = NearDuplicates(store.admission.client, store.ck).check(url, page.simhash)
        final.extra["duplicate_of"] = original
        if original is not None:
            final.counters[Counter.NEAR_DUPLICATES.value] = 1
            if opts.skip_near_duplicates:
                links = []
    final.outlinks = links
    # Links robots.txt refuses, as far as this process already holds their origins' rules,
    # are counted at admission and never become fetch tasks (admission.py).
    robots = (visit.runtime.robots, opts.robots_agent) if opts.obey_robots else None
    admitted = store.admission.links(links, depth + 1, robots, later)
    final.counters.update(admitted)


def _hook(visit: Visit, page: ParsedHTML) -> hooks.HookResult:
    """The crawl's extraction hook on this page, and its items sent to ``on_item``."""
    ctx, store, url, depth, meta = visit.ctx, visit.store, visit.url, visit.depth, visit.meta
    opts = store.opts
    view = hooks.Page(
        url=url,
        final_url=meta["final_url"],
        status=meta["status"],
        headers={k.lower(): v for k, v in (meta.get("headers") or {}).items()},
        depth=depth,
        crawl_id=store.id,
        text=page.html or "",
        tree=page.tree,
        links=tuple(page.links),
        title=page.title,
        canonical=page.canonical,
    )
    assert opts.extract is not None
    outcome = ctx.hooks.run(opts.extract, view, opts.extract_timeout)
    if outcome.error is None and outcome.items and opts.on_item:
        try:
            for i in range(0, len(outcome.items), ITEM_BATCH):
                batch = outcome.items[i : i + ITEM_BATCH]
                ctx.send_items(opts.on_item, opts.on_item_queue, store.id, url, depth, batch)
        except Exception as exc:  # the broker refused it: the page keeps its items on disk
            outcome.error = f"on_item: {type(exc).__name__}: {exc}"[:500]
    if outcome.unusable and outcome.error is not None:
        # The crawl fails once, clearly, rather than with one extract error per page.
        if store.lifecycle.failed_with(f"{outcome.error} (in worker {ctx.worker_id})"):
            log.error("crawl %s stopped: %s", store.id, outcome.error)
    elif outcome.error is not None:
        log.warning("crawl %s: extract_error on %.300s: %s", store.id, url, outcome.error)
    return outcome


def item_task_failed(ctx: Context, crawl_id: str, url: str, depth: int, error: str) -> None:
    """The user's on_item task raised on ``url``'s items (the page's record is written)."""
    store = ctx.store(crawl_id)
    if store is None:  # the crawl expired: nothing to note it in
        return
    record = {"url": url, "depth": depth, "error": None, "extract_error": error}
    store.dead_letters.add(url, record)
    store.stats.add(Counter.EXTRACT_ERRORS.value)
    log.warning("crawl %s: %s on %.300s", crawl_id, error, url)
