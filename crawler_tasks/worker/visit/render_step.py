"""The render step of one fetched HTML page (the ``render`` option): the ``crawl.render`` task.

The fetch task fetched the page over HTTP as for any page (its raw response is in the WARC),
left its body in Redis (``store.bodies``), marked it render-queued (stage "v") and published
this step. Here a browser (worker/render/browser.py) renders that body, every request of the page
going through the crawler's rules (worker/visit/render_guard.py); the rendered DOM is parsed by the
ordinary parse step (links, the extraction hook, near-duplicates and canonical all see the
DOM, not the raw HTML), written to the WARC as a ``conversion`` record referring to the raw
response, and the URL finalized once (finish.lua), as a parse task does.

A crash or a hang of the browser (:class:`RenderFailed`) costs the URL a retry: its render is
published again (the body stays), up to ``max_retries``; then, or at once for a page that
opened a dialog, a download or a pop-up (:class:`RenderRefused`), it is a recorded failure.
A render worker killed mid-page leaves stage "w" with its id: the dispatcher takes the URL
back when its heartbeat stops and publishes the render again (dispatcher.reclaim).
Under ``auto`` the render is compared with the raw parse, and the host's plan told (once per
URL: a render redelivered after its verdict was told, its first worker killed before the page
was recorded, renders again but is not counted again: state/render_plan.py); a page
queued while its host was sampling is parsed raw, without a browser, if the host has been
decided "raw" by the time its render starts, and waits for that verdict while the host's
sample is being rendered (state/render_plan.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ...errors import CrawlerError, RenderFailed, RenderRefused
from ...state.archive import CONVERSION
from ...state.formats import Counter, RenderMode, RenderRecheck
from ...state.render_plan import mode_for, rendering_added
from ...state.store import CrawlStore
from ...web.page import extract
from ..output.archive_fence import ArchiveFence
from ..render.browser import RenderJob
from ..runtime.handoff import Stage
from .outcome import Final
from .parse_step import parsed, take_stored
from .recorder import finalize
from .render_guard import SubrequestGuard
from .settle import attempt
from .trip import Visit

#: Seconds a page waiting for its host's sample verdict waits before it is published again.
SAMPLE_POLL = 0.1
#: What the browser is told of the document it is served (the body is the fetched one).
_DOC_HEADERS = ("content-type", "content-language")


def render_url(visit: Visit) -> str:
    got = take_stored(visit, "w")
    if isinstance(got, str):
        return got
    page, body = got
    if page.meta.get("render_tentative"):  # queued while its host was sampling
        early = _recheck(page, body)
        if early is not None:
            return early
    store = visit.store
    guard = SubrequestGuard(page, time.monotonic() + store.render_config.deadline)
    try:
        final = _rendered(page, body, guard)
    except RenderRefused as exc:
        final = _failed(page, exc)
    except RenderFailed as exc:
        attempts = attempt(page)
        if not attempts.last:
            visit.ctx.publisher.hand_off(store, visit.url, visit.depth, Stage.RENDER)
            return "retry"
        final = _failed(page, exc)
        final.extra["attempts"] = attempts.number
    final.counters.update(guard.counters())  # of the render recorded, not of those retried
    result = finalize(page, final)
    store.bodies.drop(visit.url)
    return result


def _recheck(visit: Visit, body: bytes) -> str | None:
    """A page queued while its host was sampling: parsed as fetched if the host has been
    decided "raw" since; published again shortly while the host's sample is being rendered
    (for at most ``render_deadline`` after its fetch: a sample render lost with its worker
    must not hold the host's pages, which are rendered then); None: render it."""
    store, url = visit.store, visit.url
    answer = store.render_plan.recheck(url)
    waited = time.time() - visit.meta.get("queued_at", 0.0)
    if answer is RenderRecheck.WAIT and waited < store.render_config.deadline:
        time.sleep(SAMPLE_POLL)  # not a busy loop through the broker while the sample renders
        visit.ctx.publisher.hand_off(store, url, visit.depth, Stage.RENDER)
        return "waiting"
    if answer is RenderRecheck.RAW:
        result = finalize(visit, parsed(visit, body))
        store.bodies.drop(url)
        return result
    return None


def _rendered(visit: Visit, body: bytes, guard: SubrequestGuard) -> Final:
    store, meta, s = visit.store, visit.meta, visit.ctx.settings
    headers = {k: v for k, v in (meta.get("headers") or {}).items() if k.lower() in _DOC_HEADERS}
    job = RenderJob(
        url=meta["final_url"],
        status=meta["status"],
        headers=headers or {"content-type": "text/html"},
        body=body,
        subrequest=guard,
        deadline=store.render_config.deadline,
        settle=s.render_settle,
        quiet=s.render_quiet,
        timer_wait=s.render_timer_wait,
        group=store.id,
        held=guard.held,
    )
    page = visit.ctx.browser.render(job)
    html = page.html.encode("utf-8")
    doc = {**meta, "rendered": True, "content_type_header": "text/html; charset=utf-8"}
    final = parsed(replace(visit, meta=doc), html)
    final.counters[Counter.RENDERED.value] = 1
    final.extra["subrequests"] = guard.made
    if guard.blocked:
        final.extra["subrequests_blocked"] = guard.blocked
    # One conversion record per URL.
    fence = ArchiveFence(store, visit.url, CONVERSION, visit.ctx.room.patience)
    visit.runtime.output().conversion(meta["final_url"], page.html, meta.get("warc_id"), fence)
    if mode_for(store.opts.render, store.opts.render_hosts, visit.url) is RenderMode.AUTO:
        added = _added(store, meta, body, html)
        final.extra["render_added"] = added
        final.extra["render_host_mode"] = store.render_plan.tell(visit.url, added).value
    return final


def _added(store: CrawlStore, meta: dict[str, Any], raw: bytes, html: bytes) -> bool:
    """Did rendering find in-scope links or much text the raw page lacks?"""
    opts, scope = store.opts, store.opts.scope
    pages = [
        extract(
            body,
            meta["final_url"],
            content_type=ctype,
            max_links=opts.max_links_per_page,
            max_url_length=opts.max_url_length,
            honour_nofollow=opts.honour_nofollow,
        )
        for body, ctype in ((raw, meta.get("content_type_header")), (html, "text/html"))
    ]
    raw_links, links = ({u for u in p.links if scope.check(u) is None} for p in pages)
    return rendering_added(raw_links, links, pages[0].text_length, pages[1].text_length)


def _failed(visit: Visit, exc: CrawlerError) -> Final:
    """A render that failed for good: a recorded failure that keeps its fetch's counters."""
    meta = visit.meta
    final = Final.failed(visit.url, visit.depth, exc)
    final.status, final.final_url = meta["status"], meta["final_url"]
    final.counters.update(meta["counters"])
    final.extra.update({**meta["extra"], "rendered": False, "detail": str(exc)[:500]})
    return final
