"""What a fetched response becomes once its host's lease is back: the continuation of the
fetch step's ``RESPONSE`` decision, run by ``settle`` after the lease (the host's next request
waits for the lease, not for this). Written here, not in the fetch step, which only decides:
the WARC record, the body stored for its parse or render (handed on with one call,
handoff.py), or the page parsed in place; the final state of anything else.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from ...state import formats
from ...state.archive import RESPONSE
from ...state.formats import Counter, Outcome, RenderAsk
from ...state.scripts import Carried
from ...web.fetcher import Response
from ...web.sniff import is_html
from ..output.archive_fence import ArchiveFence
from ..runtime.handoff import Stage
from .outcome import Final
from .parse_step import parsed
from .trip import Visit


def respond(visit: Visit, response: Response, early: bool = False) -> Final | None:
    """What a response that is not retried becomes, its lease returned: its final state, or
    None when its body went to a parse task. ``early``: its lease went back at once, its host
    waiting for that slot on a process with free threads (settle.py)."""
    store, url = visit.store, visit.url
    status = response.status
    meta = response_meta(response, bool(store.opts.extract))
    # The page's record and counters are the meta's, shared: what the WARC adds to them (a
    # revisit) goes with a stored body too.
    final = Final(
        url,
        visit.depth,
        status=status,
        final_url=response.final_url,
        content_type=response.content_type,
        extra=meta["extra"],
        counters=meta["counters"],
    )
    # A recrawl's unchanged page is a revisit record, counted in final.counters (issue 35).
    # One response (or revisit) record per URL and crawl, whatever its attempts (fenced).
    fence = ArchiveFence(store, url, RESPONSE, visit.ctx.room.patience)
    if 200 <= status < 300 and is_html(response.content_type, response.body[:1024]):
        return _page(replace(visit, meta=meta), response, fence, early)
    visit.runtime.write_warc(response, store.recrawl, final.counters, fence)
    if status == 304 and store.recrawl is not None:
        visit.ctx.room.wait()
        final.outlinks = store.recrawl.previous_links(url)
        final.counters.update(store.admission.links(final.outlinks, visit.depth + 1))
        final.note_change(Outcome.NOT_MODIFIED.value)
        return final
    if 200 <= status < 300 and store.recrawl is not None:
        final.note_change(store.recrawl.remember(url, response.headers, response.body, []))
    if 300 <= status < 400 and status != 304:
        # Not followed on purpose (out of scope, or its target is fetched from elsewhere), or
        # not followable (no Location, 300/305).
        final.error = f"redirect_{response.stop_reason or 'not_followed'}"
        final.counters[formats.skipped(final.error)] = 1
    elif status >= 400:
        final.error = Outcome.CLIENT_ERROR.value
    return final


def _page(page: Visit, response: Response, fence: ArchiveFence, early: bool) -> Final | None:
    """An HTML page (``page.meta``: the response's): parsed here (no parse task, no body
    through Redis: see Settings), or its body stored for its render or parse task.

    Parsed here, its links' admit.lua calls ride in the round trip of the WARC reservation
    (warc_appends.py), one round trip a page fewer (issue 32); both are done before the
    URL's finish. Where the lease went back at once (``early``, settle.py: the host waits for
    this very slot and the process has free threads, a few hosts at their concurrency), that
    round trip is spent and the records written first, as soon as the response is in:
    parsed first, a link-dense site ran ~6 % slower (1.22x the loop against 1.31x, 11
    alternated pairs, bench/README.md round 9). A full pool (the CPU is the limit) or a host
    held by its rate saves it."""
    ctx, store, runtime, url, meta = page.ctx, page.store, page.runtime, page.url, page.meta
    opts = store.opts
    ask = store.render_plan.wants(opts.render, opts.render_hosts, url, response.body)
    here = not ask and len(response.body) <= ctx.settings.inline_parse_bytes
    if here and not early:
        later = Carried(store.admission.client)
        final = parsed(page, response.body, later)
        fence.carried = later
        runtime.write_warc(response, store.recrawl, final.counters, fence)
        later.settle()  # those no round trip carried, and the replies' follow-up
        return final
    warc_id = runtime.write_warc(response, store.recrawl, meta["counters"], fence)
    if here:  # its records first, as soon as the response is in
        return parsed(page, response.body)
    if ask:
        # Rendered by a crawl.render worker (render_step.py), from this body.
        tentative = ask is RenderAsk.TENTATIVE  # looked at again when its render starts
        doc = {**meta, "warc_id": warc_id, "render_tentative": tentative}
        doc["queued_at"] = time.time()
        store.bodies.put(url, json.dumps(doc), response.body)
        ctx.publisher.hand_off(store, url, page.depth, Stage.RENDER)
        return None
    store.bodies.put(url, json.dumps(meta), response.body)
    ctx.publisher.hand_off(store, url, page.depth, Stage.PARSE)
    return None


# Response headers the parse step (and the recrawl validators) need.
_KEPT_HEADERS = ("content-type", "x-robots-tag", "content-language", "etag", "last-modified")


def response_meta(response: Response, all_headers: bool = False) -> dict[str, Any]:
    """The response as its parse step and its final record need it: status, URLs, the
    headers kept (``all_headers``, a crawl with an extraction hook: every header but
    Set-Cookie, which may carry a session), its record's fields and its counters."""
    n = len(response.body)
    return {
        "status": response.status,
        "final_url": response.final_url,
        "content_type": response.content_type,
        "content_type_header": response.headers.get("content-type"),
        "headers": {
            k: v
            for k, v in response.headers.items()
            if (k.lower() != "set-cookie" if all_headers else k.lower() in _KEPT_HEADERS)
        },
        "extra": {
            "fetched_at": time.time(),
            "bytes": n,
            "truncated": response.truncated,
            "redirects": [target for _, target in response.redirects],
            "ip": response.ip,
        },
        "counters": {
            Counter.FETCHED.value: 1,
            formats.status_code(response.status): 1,
            Counter.BYTES.value: n,
        },
    }
