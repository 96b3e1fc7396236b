"""The send gate, worker side: a fetch task sends no request to its host before the slot the
host's gate gave it (state/lua/gate_lib.lua), whatever happened between the URL's release and
this moment (a broker queue, a thread pool, a starved CPU, a take-back, a redelivery).

start.lua gives the page its slot in the round trip that marks it begun, so the usual page
costs no extra call. Two cases ask again (gate.lua, one round trip each, both rare): a second
request of the same task (the page after its host's robots.txt), and a task held up past its
slot by more than :data:`LATE` (a starved or frozen process), whose URL may meanwhile have
been taken back and given to another process: then it is not sent at all. A host with a
shared ceiling (set-ceiling) has one more gate, common to every crawl (ceiling_gate.lua).
A shared gate (the address's, a ceiling's) is looked at again just before the request is
written (:meth:`SendSlot.recheck`): a thread starved after its slot would send too close to
the next request, which another host or crawl sends on time. A host's own gate is shared too
when the crawl renders: its pages' scripts and XHRs take their slots from it
(:class:`SubrequestSlot`, subrequest.lua) while its next page is fetched, so done.lua's
correction from a page's real send comes too late for them (issue 50: a subrequest written
late after its slot, then three pages on time, put 4 requests in 0.97 s at rate 2).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...state.ceilings import Ceilings
from ...state.formats import Begun
from ...state.render_plan import renders
from ...state.store import CrawlStore

#: Seconds past its slot after which a request asks for a new one instead of going at once:
#: its process was held up (CPU starvation, a freeze) and the slot is stale. Well above the
#: scheduling noise of a busy process, well below worker_dead_seconds.
LATE = 1.0
#: The same for a host whose requests share its server address's gate (``ip_rate``): other
#: hosts' requests take the slots after this one, so one sent late comes that much closer to
#: the next; a slot gone by more than this is given up (the gate advanced, which errs polite)
#: and a fresh one asked. A host's own gate needs no such care: its next request takes its
#: slot only after done.lua moved the gate on from this one's real send.
LATE_SHARED = 0.05
#: Fresh slots one request asks at most when it keeps waking late.
REASKS = 3
#: Longest single sleep of a subrequest waiting for its host's token (asked again after it).
TOKEN_POLL = 0.25


@dataclass
class SendSlot:
    """The send slots of one fetch task's host, used through ``Fetcher.gated(slot.wait)``;
    taken by :meth:`of`, from start.lua's answer."""

    store: CrawlStore
    url: str
    domain: str
    ceilings: Ceilings
    #: Not sent before (time.monotonic()); None once used: a later request asks a new slot.
    send_at: float | None
    #: How late it is counts from the slot as seen before the ask: a thread that lost the
    #: CPU while the answer reached it would otherwise look on time (a shared gate's next
    #: request, sent on time, would then come right after it).
    due: float
    #: Another request may take a slot of this host's or address's gate between this one's
    #: slot and its write: an address's hosts, or the subrequests of rendered pages.
    shared: bool
    #: :data:`LATE_SHARED` for a shared gate, else :data:`LATE`.
    late: float
    passed: float = math.inf  # when wait() let the request go

    @classmethod
    def of(
        cls,
        store: CrawlStore,
        url: str,
        domain: str,
        worker: str,
        begun: Begun,
        ceilings: Ceilings,
    ) -> SendSlot | None:
        """The slot start.lua gave the task (``begun``), before anything is sent; None when
        the task was held up so long past it that its URL was taken back (another process
        owns it now: this task must not send). Late but still its own: a fresh slot."""
        send_at, due = begun.at + begun.wait, (begun.asked or begun.at) + begun.wait
        opts = store.opts
        shared = opts.ip_rate > 0 or renders(opts.render, opts.render_hosts)
        late = LATE_SHARED if shared else LATE
        if time.monotonic() - due > late:
            asked = time.monotonic()
            wait = store.ledger.send_slot(domain, url, worker)
            if wait < 0:
                return None
            send_at, due = time.monotonic() + wait, asked + wait
        return cls(store, url, domain, ceilings, send_at, due, shared, late)

    def wait(self) -> Callable[[], None]:
        """Sleep until this request's slot: start.lua's for the first request, a new one
        for each later request (a page after robots.txt), and a new one when this one went
        stale while the thread waited for the CPU, before its sleep or in it (a starved
        process oversleeps; at most :data:`REASKS` times, then it goes: the gates advanced
        each time, which errs polite). Returns :meth:`recheck`, the look before the write."""
        send_at, due, self.send_at = self.send_at, self.due, None
        for _ in range(REASKS):
            if send_at is None or time.monotonic() - due > self.late:
                asked = time.monotonic()
                wait = max(0.0, self.store.ledger.send_slot(self.domain))
                send_at, due = time.monotonic() + wait, asked + wait
            delay = send_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if time.monotonic() - due <= self.late:
                break
        # From before the ceiling's ask that took the slot, not from its answer: a thread
        # that lost the CPU between the two would otherwise look on time at the recheck.
        passed = wait_under_ceiling(self.ceilings, self.store, self.domain)
        assert passed is not None  # no ``until``: it waits as long as the gate says
        self.passed = passed
        return self.recheck

    def recheck(self) -> None:
        """Just before the request is written (after its connection, the pinning, requests'
        own work): a thread that lost the CPU since its slot would send that much closer to
        the next request of a shared gate (another host's on the address, another crawl's
        under the ceiling, a rendered page's subrequest: 0.23 s of a 0.25-s interval seen
        under the suite's load). Past :data:`LATE_SHARED`, the slot is given up and the shared
        gates asked again (a host's own gate only when it is shared: else done.lua moves it on
        from the real send before the host's next request can take a slot)."""
        if time.monotonic() - self.passed <= LATE_SHARED:
            return
        if self.shared:  # the host's and its address's gates again
            time.sleep(max(0.0, self.store.ledger.send_slot(self.domain)))
        wait_under_ceiling(self.ceilings, self.store, self.domain)


class SubrequestSlot:
    """The send slot of one subrequest of a rendered page (worker/visit/render_guard.py): its
    host's token and gate slot (subrequest.lua), then its host's shared ceiling, waited for
    within the render's deadline (:meth:`take`); and, just before the write (through
    ``Fetcher.gated``), taken again when the thread lost the CPU since (:meth:`recheck`): the
    host's pages and other subrequests take their slots from this one's, and a subrequest
    written late came that much closer to them (issue 50: 0.05 s early by kernel stamps)."""

    def __init__(
        self, store: CrawlStore, ceilings: Ceilings, domain: str, hold: Callable[[int], None]
    ) -> None:
        self.store, self.domain, self._ceilings, self._hold = store, domain, ceilings, hold
        self._passed = math.inf  # when the slot was taken (time.monotonic())

    def take(self, until: float = math.inf) -> bool:
        """Sleep until the host's token and slot are this request's (False: not before
        ``until``, time.monotonic(); nothing taken then). ``hold`` is told while it waits."""
        opts, polite = self.store.opts, self.store.politeness
        self._hold(1)
        try:
            # How late it is counts from before the ask that takes the slot (SendSlot's rule:
            # a thread that lost the CPU while the answer reached it is late too).
            asked = time.monotonic()
            while (wait := polite.subrequest(self.domain, opts.rate, opts.burst)) > 0:
                if time.monotonic() + wait > until:
                    return False
                time.sleep(min(wait, TOKEN_POLL))
                asked = time.monotonic()
            passed = wait_under_ceiling(self._ceilings, self.store, self.domain, until, asked)
        finally:
            self._hold(-1)
        if passed is None:
            return False
        self._passed = passed
        return True

    def gate(self) -> Callable[[], None]:
        """For ``Fetcher.gated``: the slot is taken already (:meth:`take`); the look before the
        write is :meth:`recheck`."""
        return self.recheck

    def sent(self, sent_at: float | None) -> None:
        """The request was written at ``sent_at`` (time.monotonic(); None: unknown): the
        host's gate counts on from then, as done.lua moves it on from a page's real send (a
        write late by less than :data:`LATE_SHARED` would bring the host's next request that
        much closer)."""
        if sent_at is not None:
            self.store.ledger.push_send_slot(self.domain, max(0.0, time.monotonic() - sent_at))

    def recheck(self) -> None:
        """Just before the write: past :data:`LATE_SHARED` since the slot (the address check,
        the connection, a starved thread), a new slot, as long as the gate says (the first
        one is spent: errs polite); at most :data:`REASKS` times."""
        for _ in range(REASKS):
            if time.monotonic() - self._passed <= LATE_SHARED:
                return
            self.take()


def wait_under_ceiling(
    ceilings: Ceilings,
    store: CrawlStore,
    domain: str,
    until: float = math.inf,
    asked: float | None = None,
) -> float | None:
    """Once the request's own slot has come: when the host has a ceiling that every crawl
    shares (set-ceiling), sleep until its gate lets the request go: asked when due, round
    trips of its own, by such hosts only. If the ceiling held the request past its own slot,
    the host's gate counts on from now, so the crawl's own interval holds after it too. For
    pages (SendSlot) and a rendered page's subrequests (render_guard.py). The time.monotonic()
    just before the ask that took the slot (now, for a host without a ceiling); None: the
    gate would not let it go before ``until`` (time.monotonic()); nothing was taken.
    ``asked``: when the caller asked for the request's own slot (its time.monotonic(), returned
    for a host without a ceiling; default now)."""
    asked = time.monotonic() if asked is None else asked
    rate = ceilings.rates().get(domain)
    if rate is None:
        return asked
    held = False
    while (wait := ceilings.send_slot(domain, rate)) > 0:
        if time.monotonic() + wait > until:
            return None
        held = True
        time.sleep(wait)
        asked = time.monotonic()
    if held:
        store.ledger.push_send_slot(domain)
    return asked
