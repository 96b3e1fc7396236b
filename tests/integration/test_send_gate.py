"""How late a request is for its send slot (worker/runtime/send_gate.py) counts from before the ask
that gave the slot: a fetch thread that loses the CPU between Redis giving the slot and the
answer reaching it must not look on time, or it sends right after the next request of a gate
that several share, sent on its own slot. Found by the suite under load: two requests of a
4-req/s ceiling 24 ms apart at the server. A ceiling's gate: real Redis and the real gate
script, the lost CPU a sleep after its answer. An address's gate (start.lua's slot): the same
rule on the times of the answer."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import redis

from crawler_tasks.state.ceilings import Ceilings, set_ceiling
from crawler_tasks.state.formats import Begun
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.scripts import Scripts
from crawler_tasks.worker.runtime.send_gate import SendSlot

HOST = "ceiling.test"
RATE = 4.0  # requests/s for all crawls together
STARVED = 0.3  # seconds the first thread loses the CPU after its slot was taken


class _Starved(Ceilings):
    """A process's ceilings whose thread loses the CPU right after a slot is given to it."""

    def send_slot(self, host: str, rate: float) -> float:
        wait = super().send_slot(host, rate)
        if wait <= 0:
            time.sleep(STARVED)
        return wait


def _slot(ceilings: Ceilings) -> SendSlot:
    # A crawl without an address rate; its own gate let the page go now (start.lua's answer).
    store: Any = SimpleNamespace(
        opts=SimpleNamespace(ip_rate=0), ledger=SimpleNamespace(push_send_slot=lambda d: None)
    )
    return SendSlot(store, "http://ceiling.test/", HOST, "w", Begun(0, 0.0, time.monotonic()),
                    ceilings)  # fmt: skip


def test_a_ceiling_slot_that_reached_its_thread_late_is_asked_again(client: redis.Redis) -> None:
    keys, scripts = Keys("gate-test"), Scripts(client)
    set_ceiling(client, keys, HOST, RATE)
    sent: dict[str, float] = {}

    def other_crawl() -> None:  # its slot comes while the first thread is starved
        time.sleep(0.05)
        look = _slot(Ceilings(client, keys, scripts)).wait()
        look()
        sent["other"] = time.monotonic()

    other = threading.Thread(target=other_crawl)
    other.start()
    look = _slot(_Starved(client, keys, scripts)).wait()  # its slot, then the CPU lost
    other.join(10)
    look()  # the look before the write
    sent["starved"] = time.monotonic()
    assert sent["starved"] - sent["other"] >= 1 / RATE - 0.1, sent
