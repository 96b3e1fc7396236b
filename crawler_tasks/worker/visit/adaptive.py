"""An adaptive schedule's page that is not due (issue 35): not fetched; its final state says so
and carries the links the previous run found on it, so the run still reaches the pages it
leads to (as a 304 does). Its politeness token is given back (no request was sent)."""

from __future__ import annotations

from ...state.formats import Counter
from .recorder import Final
from .trip import Visit


def not_due(visit: Visit) -> Final | None:
    store, url, depth = visit.store, visit.url, visit.depth
    links = store.recrawl.not_due(url) if store.recrawl is not None else None
    if links is None:
        return None
    visit.ctx.room.wait()  # before its links are admitted
    final = Final(url, depth, outlinks=links, extra={"not_due": True})
    final.counters[Counter.NOT_DUE.value] = 1
    final.counters.update(store.admission.links(links, depth + 1))
    return final
