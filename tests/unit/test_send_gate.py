"""How late a request is for its send slot counts from before the ask that gave the slot
(worker/runtime/send_gate.py): an address's gate (start.lua's slot), the rule on the times of
the answer. A ceiling's gate with a real Redis: tests/integration/test_send_gate.py."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from crawler_tasks.state.formats import Begun
from crawler_tasks.worker.runtime.send_gate import SendSlot


def test_a_start_reply_that_reached_its_thread_late_is_asked_again() -> None:
    """start.lua gave the slot at once (wait 0), and the answer reached the thread 0.3 s after
    it asked: on an address's gate (ip_rate) that is late, so a fresh slot is asked first."""
    asked: list[str] = []

    def send_slot(domain: str, url: str = "", worker: str = "") -> float:
        asked.append(domain)
        return 0.0

    store: Any = SimpleNamespace(
        opts=SimpleNamespace(ip_rate=3.0), ledger=SimpleNamespace(send_slot=send_slot)
    )
    now = time.monotonic()
    on_time = Begun(1, 0.0, now, False, now - 0.01)
    late = Begun(1, 0.0, now, False, now - 0.3)
    no_ceiling: Any = SimpleNamespace(rates=dict)
    for begun, asks in ((on_time, []), (late, ["h.test"])):
        slot = SendSlot.of(store, "http://h.test/", "h.test", "w", begun, no_ceiling)
        assert slot is not None
        slot.wait()
        assert asked == asks
