"""An adaptive schedule's page that is not due (issue 35): not fetched; its final state says so
and carries the links the previous run found on it, so the run still reaches the pages it
leads to (as a 304 does). Its politeness token is given back (no request was sent).

The fetch step only asks (:func:`not_due`, a read); ``settle`` writes once the lease is back
(:func:`skipped`): the page seen by this run, its links admitted.
"""

from __future__ import annotations

from ...state.formats import Counter, LeaseEnd
from ...state.validators import Seen
from .outcome import Decision, Final, Next
from .trip import Visit


def not_due(visit: Visit) -> Decision | None:
    """The decision for a page its schedule does not need now; None: fetch it."""
    recrawl = visit.store.recrawl
    assert recrawl is not None  # only a schedule's run has pages not due
    seen = recrawl.not_due(visit.url)
    if seen is None:
        return None
    final = Final(visit.url, visit.depth, outlinks=seen.links, extra={"not_due": True})
    final.counters[Counter.NOT_DUE.value] = 1
    return Decision(Next.NOT_DUE, LeaseEnd.REFUND, final=final, seen=seen)


def skipped(visit: Visit, final: Final, seen: Seen) -> Final:
    """After the lease: the page counts as seen by this run, and the links its last visit
    found are admitted (their counters added to ``final``)."""
    store = visit.store
    assert store.recrawl is not None  # only a schedule's run has pages not due
    store.recrawl.skipped(visit.url, seen)
    visit.ctx.room.wait()  # before its links are admitted
    final.counters.update(store.admission.links(final.outlinks, visit.depth + 1))
    return final
