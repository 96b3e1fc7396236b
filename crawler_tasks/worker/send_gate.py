"""The send gate, worker side: a fetch task sends no request to its host before the slot the
host's gate gave it (state/lua/gate_lib.lua), whatever happened between the URL's release and
this moment (a broker queue, a thread pool, a starved CPU, a take-back, a redelivery).

start.lua gives the page its slot in the round trip that marks it begun, so the usual page
costs no extra call. Two cases ask again (gate.lua, one round trip each, both rare): a second
request of the same task (the page after its host's robots.txt), and a task held up past its
slot by more than :data:`LATE` (a starved or frozen process), whose URL may meanwhile have
been taken back and given to another process: then it is not sent at all. A host with a
shared ceiling (set-ceiling) has one more gate, common to every crawl (ceiling_gate.lua).
"""

from __future__ import annotations

import time

from ..state.ceilings import Ceilings
from ..state.formats import Begun
from ..state.store import CrawlStore

#: Seconds past its slot after which a request asks for a new one instead of going at once:
#: its process was held up (CPU starvation, a freeze) and the slot is stale. Well above the
#: scheduling noise of a busy process, well below worker_dead_seconds.
LATE = 1.0


#: Seconds by which a ceiling must hold a request past its own slot for the host's gate to be
#: moved on (below it, the gap is Redis's clock resolution, not a push).
PUSHED = 0.001


class SendSlot:
    """The send slots of one fetch task's host, used through ``Fetcher.gated(slot.wait)``."""

    def __init__(
        self, store: CrawlStore, url: str, domain: str, worker: str, begun: Begun,
        ceilings: Ceilings,
    ) -> None:  # fmt: skip
        self.store, self.url, self.domain, self.worker = store, url, domain, worker
        self._send_at: float | None = begun.send_at()
        self._ceilings = ceilings

    def still_ours(self) -> bool:
        """Before anything is sent: False when the task was held up so long that its URL
        was taken back (another process owns it now; this task must not send)."""
        if self._send_at is None or time.monotonic() - self._send_at <= LATE:
            return True
        wait = self.store.ledger.send_slot(self.domain, self.url, self.worker)
        if wait < 0:
            return False
        self._send_at = time.monotonic() + wait
        return True

    def wait(self) -> None:
        """Sleep until this request's slot: start.lua's for the first request, a new one
        for each later request (a page after robots.txt), and a new one when this one went
        stale while the thread waited for the CPU."""
        send_at, self._send_at = self._send_at, None
        if send_at is None or time.monotonic() - send_at > LATE:
            send_at = time.monotonic() + max(0.0, self.store.ledger.send_slot(self.domain))
        delay = under_ceiling(self._ceilings, self.store, self.domain, send_at - time.monotonic())
        if delay > 0:
            time.sleep(delay)


def under_ceiling(ceilings: Ceilings, store: CrawlStore, domain: str, delay: float) -> float:
    """Seconds to wait before sending to ``domain``: ``delay`` (its crawl's own slot), or
    later when the host has a ceiling that every crawl shares (set-ceiling: its own gate, one
    round trip, asked only for such hosts). If the ceiling holds the request past its slot,
    the host's gate counts on from the later moment, so the crawl's own interval holds after
    it too. For pages (SendSlot) and a rendered page's subrequests (render_guard.py)."""
    rate = ceilings.rates().get(domain)
    if rate is None:
        return delay
    later = ceilings.send_slot(domain, rate, delay)
    if later > max(0.0, delay) + PUSHED:
        store.ledger.push_send_slot(domain, later)
    return later
