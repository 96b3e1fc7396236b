"""A broad web for overload tests: bench/_broad_server.py (hundreds of hosts on 127.10.x.y,
50-350 ms per response) in its OWN process, so its arrival stamps are taken by a process the
crawler's threads do not starve of the GIL; plus CPU hogs to put beside the workers, and the
checks a polite crawl must pass judged from the server's stamps.

The server stamps each request with ``time.time()`` when its head has been read (before the
response's latency): the moment the request reached the host, as a site operator counts it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from crawler_tasks.surface.embedded import free_port
from tests.support.paths import BENCH

sys.path.insert(0, str(BENCH))
from _broad_server import address  # noqa: E402 - bench/ is not a package
from _wire import Wire, early, lag, unavailable  # noqa: E402

#: Seconds a kernel arrival stamp may be off the send gate's pace: the stamps are exact, the
#: gate paces by Redis's clock; GCRA sends 1 s apart must not count as 3 in 1 s.
WIRE_TOLERANCE = 0.02


class BroadWeb:
    """The server subprocess: ``hosts`` hosts of ``pages`` pages each (a binary tree of
    links from ``/``, 3 cross-host links per page, robots.txt disallowing /private/)."""

    def __init__(self, log_dir: Path, hosts: int, pages: int, latency=(0.05, 0.35)) -> None:  # type: ignore[no-untyped-def]
        self.hosts, self.pages, self.port = hosts, pages, free_port()
        self.log = log_dir / "server.log"
        self.log.touch()
        cmd = [sys.executable, str(BENCH / "_broad_server.py"), "--hosts", str(hosts)]
        cmd += ["--pages", str(pages), "--port", str(self.port), "--log", str(self.log)]
        cmd += ["--low", str(latency[0]), "--high", str(latency[1])]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            self.close()
            raise RuntimeError("bench/_broad_server.py did not start")
        #: Why there are no kernel arrival stamps (bench/_wire.py: root or CAP_NET_RAW), or None.
        self.wire_off = unavailable()
        self.wire = Wire(self.port) if self.wire_off is None else None
        self._captured: tuple[list[tuple[float, str, str]], int] | None = None

    def address(self, i: int) -> str:
        return address(i)

    def seeds(self) -> list[str]:
        return [f"http://{address(i)}:{self.port}/" for i in range(self.hosts)]

    def domains(self) -> list[str]:
        return [address(i) for i in range(self.hosts)]

    def expected(self) -> set[str]:
        """Every page's URL as the crawl records it (normalised)."""
        out = set()
        for i in range(self.hosts):
            base = f"http://{address(i)}:{self.port}"
            out.add(base + "/")
            out.update(f"{base}/p/{k}.html" for k in range(1, self.pages))
        return out

    def requests(self) -> list[tuple[float, int, str, str]]:
        """(time.time(), host index, kind, path) of every request so far (kind: robots,
        page, private, other)."""
        time.sleep(0.3)  # the server writes its lines every 0.2 s
        out = []
        for line in self.log.read_text().splitlines():
            t, host, kind, path, _size = line.split("\t")
            if kind not in ("inflight", "conn"):
                out.append((float(t), int(host), kind, path))
        return out

    def arrivals(self) -> tuple[list[tuple[float, int, str, str]], int]:
        """Every request so far as the kernel stamped it (as :meth:`requests`), and the
        packets the capture dropped (must be 0 for the judge to count)."""
        assert self.wire_off is None, self.wire_off
        if self.wire is not None:
            captured, drops = self.wire.snapshot(), self.wire.drops
        else:  # closed with the server: what it had captured
            assert self._captured is not None
            captured, drops = self._captured
        hosts = {address(i): i for i in range(self.hosts)}
        out = []
        for t, dst, line in captured:
            path = line.split(" ")[1].split("?", 1)[0] if line.count(" ") >= 2 else ""
            kind = (
                "robots" if path == "/robots.txt" else "private" if "/private/" in path else "page"
            )
            out.append((t, hosts.get(dst, -1), kind, path))
        return out, drops

    def stamp_lag(self, requests: list[tuple[float, int, str, str]]) -> dict[str, float]:
        """How late the server stamped ``requests`` after the kernel (ms: p50, p99, max)."""
        stamps: dict[tuple[str, str], list[float]] = defaultdict(list)
        for t, host, _kind, path in requests:
            stamps[(address(host), path)].append(t)
        captured = self._captured[0] if self._captured else self.wire.snapshot()  # type: ignore[union-attr]
        return lag(captured, stamps)

    def close(self) -> None:
        if self.wire is not None:
            self._captured = (self.wire.close(), self.wire.drops)
            self.wire = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def broad_web(log_dir: Path, hosts: int, pages: int) -> Iterator[BroadWeb]:
    web = BroadWeb(log_dir, hosts, pages)
    try:
        yield web
    finally:
        web.close()


def max_in_window(times: list[float], width: float = 1.0) -> int:
    """Most of ``times`` (sorted) inside any half-open window [t, t + width)."""
    return max((bisect.bisect_left(times, t + width) - i for i, t in enumerate(times)), default=0)


def per_host_times(requests: list[tuple[float, int, str, str]]) -> dict[int, list[float]]:
    """Every request a host received (robots.txt included: it is a request to the host)."""
    by_host: dict[int, list[float]] = defaultdict(list)
    for t, host, _kind, _path in requests:
        by_host[host].append(t)
    return {h: sorted(ts) for h, ts in by_host.items()}


#: Seconds a server stamp may be off the moment its request was sent, relative to the stamp of
#: the host's previous request: the server stamps when its event loop gets to the request,
#: and on a loaded 2-core machine that comes a little late for one request and not the next.
#: Issue 31's violations were sends 0.4-0.6 s early at 1 req/s: well above it.
STAMP_TOLERANCE = 0.15

#: Seconds by which a kernel arrival stamp may be early on a gate shared by several requests in
#: flight (a ceiling's: three crawls x 4; an address's: 12 hosts; a rendered page's
#: subrequests): a request takes its slot when due, then resolves, takes a connection and
#: writes, and in a starved process that comes late (<= 0.03 s beside a hog at load 9-14;
#: 0.10 s under the whole suite's load; 0.16 s with two suites at once on 2 cores, load 37),
#: so the next request, on time, follows it that much closer. Above WIRE_TOLERANCE (one
#: request in flight per host: done.lua moves the host's gate on from the real send, exact);
#: below the 0.28-0.33 s early that pacing at release alone let through (issue 31).
SHARED_GATE_TOLERANCE = 0.2


def assert_shared_gate_held(
    arrivals: list[float] | None,
    report: dict,
    interval: float,  # type: ignore[type-arg]
) -> None:
    """No two of a shared gate's requests closer than ``interval``: by kernel arrival stamps
    (``arrivals``, all of them: as many as the server logged) within SHARED_GATE_TOLERANCE,
    or, where this process cannot read them (None), by the server's (``rate_report``'s
    ``report``) within STAMP_TOLERANCE."""
    if arrivals is not None:
        assert len(arrivals) == report["count"], (len(arrivals), report)
        assert early(arrivals, interval, 0, SHARED_GATE_TOLERANCE) == [], arrivals
    else:
        assert report["min_interval"] >= interval - STAMP_TOLERANCE, report


def early_sends(
    times: list[float], interval: float, burst: int, tolerance: float = STAMP_TOLERANCE
) -> list[float]:
    """How early (s) each request of a host arrived that a GCRA of ``interval`` and
    ``burst`` (what the send gate promises, gate_lib.lua) would not have let go, beyond
    :data:`STAMP_TOLERANCE` (the kernel judge's rule, bench/_wire.py, on server stamps)."""
    return early(times, interval, burst, tolerance)


def impolite_hosts(
    requests: list[tuple[float, int, str, str]],
    rate: float,
    burst: int,
    tolerance: float = STAMP_TOLERANCE,
) -> dict[int, str]:
    """The hosts whose requests broke the pace, at the server: more than ``rate + 1`` in a
    1-s window (issue 31's rule for burst 1; the window narrowed by the tolerance, since
    GCRA sends exactly 1 s apart are within it), or a request early for the GCRA."""
    out = {}
    for h, ts in per_host_times(requests).items():
        crowded = max_in_window(ts, 1.0 - tolerance) > rate + burst
        early = early_sends(ts, 1.0 / rate, burst, tolerance)
        if crowded or early:
            out[h] = f"early by {early}, arrivals {[round(t - ts[0], 2) for t in ts]}"
    return out


def page_counts(requests: list[tuple[float, int, str, str]]) -> Counter[tuple[int, str]]:
    return Counter((h, p) for _t, h, kind, p in requests if kind == "page")


@contextlib.contextmanager
def cpu_hogs(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy loops at normal priority beside the workers (each takes a core's share)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            p.wait(5)
