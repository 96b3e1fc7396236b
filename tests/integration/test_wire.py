"""Kernel arrival stamps (bench/_wire.py), the judge of issue 31's pace: it is not fooled by a
starved server. The server (bench/_broad_server.py in its own process) is stopped while three
requests are sent 0.4 s apart (the kernel accepts the connections and buffers the requests);
resumed, it stamps all three at once, the kernel's stamps keep the spacing they were sent at."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.broad_web import broad_web, max_in_window, per_host_times
from tests.support.waiting import wait_until
from tests.unit.test_wire import send


def test_kernel_stamps_are_not_fooled_by_a_stopped_server(tmp_path: Path) -> None:
    with broad_web(tmp_path, 2, 2) as web:
        if web.wire_off is not None:
            pytest.skip(web.wire_off)  # said, never passed silently
        web.proc.send_signal(signal.SIGSTOP)
        try:
            socks = []
            for path in ("/robots.txt", "/", "/p/1.html"):
                socks.append(send(web.address(0), web.port, path))
                time.sleep(0.4)
        finally:
            web.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: len(web.requests()) == 3, timeout=10)
        server = web.requests()
        kernel, drops = web.arrivals()
        for s in socks:
            s.close()
    assert drops == 0
    assert [r[3] for r in sorted(kernel)] == ["/robots.txt", "/", "/p/1.html"]
    assert {r[1] for r in kernel} == {0}
    [server_times] = per_host_times(server).values()
    [kernel_times] = per_host_times(kernel).values()
    # The stopped server stamped the three together: "3 in 1 s" by its stamps.
    assert server_times[-1] - server_times[0] < 0.2, server_times
    assert max_in_window(server_times) == 3
    # The kernel stamped them as they were sent, 0.4 s apart (sleep's overshoot aside).
    gaps = [b - a for a, b in zip(kernel_times, kernel_times[1:], strict=False)]
    assert all(0.39 < g < 0.6 for g in gaps), gaps
