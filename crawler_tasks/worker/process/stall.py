"""Whether this process was itself held up (a paused VM, memory pressure, a Redis away), for
the two places that judge other processes dead by their heartbeats: the reclaim
(repair.Repair) and host affinity's holders (routing.HostRouter).

After such a stall every heartbeat this process reads may be stale only because the others
were held up too, or because their beats wait to be written: a process judged dead then
loses what it holds (its URLs taken back, its direct queue and its messages deleted) while
it is alive. So a look that comes much later than its cadence, or that is held up between
its start and its reads, lets heartbeats catch up for one dead threshold before it judges
anyone.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class StallGuard:
    """``every``: seconds between two looks when nothing holds this process up; ``dead``:
    worker_dead_seconds; ``what``: who looks (its log line)."""

    def __init__(self, every: float, dead: float, what: str) -> None:
        self._every, self._dead, self._what = every, dead, what
        #: time.monotonic() of the look before this one and of this one's start, and until
        #: when none judges.
        self._previous: float | None = None
        self._last: float | None = None
        self._quiet_until = 0.0

    def quiet(self) -> bool:
        """Called at each look's start: True while nobody may be judged dead. A look later
        than ``every`` + ``dead`` after the previous one starts a quiet period of ``dead``
        (shorter gaps, a busy process's, cannot make a living worker look dead by
        themselves: it beat within the threshold)."""
        now = time.monotonic()
        self._previous, self._last = self._last, now
        return self._judged_at(now)

    def held_up(self) -> bool:
        """Called again once the look has read the heartbeats it judges by, before it acts:
        the same rule at this moment. A process paused in the middle of its look (a whole
        paused VM: after :meth:`quiet`, before its reads) read every other's beat as late
        as after a pause before the look, while the others' first beats since were still to
        be written (tests/faults/test_overload.py's whole-machine pause saw a URL taken back)."""
        return self._judged_at(time.monotonic())

    def _judged_at(self, now: float) -> bool:
        last = self._previous
        if last is not None and now - last > self._every + self._dead:
            log.warning(
                "%s held up %.1f s: judging no worker dead for %g s",
                self._what,
                now - last,
                self._dead,
            )
            self._quiet_until = now + self._dead
            self._previous = self._last = now  # counted once, not again by the next look
        return now < self._quiet_until

    def hold(self, seconds: float) -> None:
        """Judge nobody dead for ``seconds`` from now (after a Redis error: heartbeats could
        not be written either)."""
        self._quiet_until = max(self._quiet_until, time.monotonic() + seconds)
