"""Kernel arrival stamps of HTTP requests on ``lo``: a politeness judge a starved server
cannot fool (issue 31; used by bench/broad.py and tests/faults/test_overload.py).

The broad server stamps a request with ``time.time()`` when its event loop has read the
head; on a loaded machine that loop runs late and in bursts, so two requests sent 1 s apart
can be stamped 0.5 s apart. Here an ``AF_PACKET`` socket on ``lo`` (``SOCK_DGRAM``: IP
packets, no link header) gets each client-to-server packet with ``SO_TIMESTAMPNS``: the
kernel stamps the packet as the loopback device queues it to the receive path, i.e. as the
client's write reaches the kernel, whoever reads the socket and however late. Only the
reader can be starved, and then the socket's buffer (64 MB, a BPF filter keeping only
packets to the server's port, cut to their first 200 bytes) fills; the kernel counts what it
drops (``PACKET_STATISTICS``) and :attr:`Wire.drops` reports it: a judge with drops is not a
judge.

Each request counts once: ``PACKET_OUTGOING`` copies (every ``lo`` packet is seen leaving and
arriving) are dropped, a retransmitted segment (same connection and sequence number) is
counted once, and only TCP payloads starting with an HTTP method are requests. Plain HTTP
only: with TLS the request is inside encrypted records (``--https`` is not covered).

Needs root or ``CAP_NET_RAW``: :func:`unavailable` says why not, and callers skip the judge
(they never pass it silently).
"""

from __future__ import annotations

import bisect
import socket
import struct
import threading
from collections.abc import Iterable

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35  # SO_TIMESTAMPNS_OLD on Linux: a struct timespec of two longs
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
SNAP = 200
METHODS = (b"GET ", b"HEAD ", b"POST ", b"PUT ", b"DELETE ", b"OPTIONS ", b"PATCH ")


def _filter(port: int) -> bytes:
    """Classic BPF (offsets from the IP header, as SOCK_DGRAM sees packets): IPv4 TCP,
    not a later fragment, destination port ``port``, not an outgoing copy; ``SNAP`` bytes."""
    ad_pkttype = (-0x1000 + 4) & 0xFFFFFFFF  # SKF_AD_OFF + SKF_AD_PKTTYPE
    prog = [
        (0x20, 0, 0, ad_pkttype),  # ld pkttype
        (0x15, 8, 0, PACKET_OUTGOING),  # 1: jeq outgoing -> drop
        (0x30, 0, 0, 9),  # ldb [9]: protocol
        (0x15, 0, 6, 6),  # 3: jne tcp -> drop
        (0x28, 0, 0, 6),  # ldh [6]: flags + fragment offset
        (0x45, 4, 0, 0x1FFF),  # 5: jset offset -> drop
        (0xB1, 0, 0, 0),  # ldx 4 * ([0] & 0xf): the IP header's length
        (0x48, 0, 0, 2),  # ldh [x + 2]: destination port
        (0x15, 0, 1, port),  # 8: jne port -> drop
        (0x06, 0, 0, SNAP),  # 9: ret SNAP
        (0x06, 0, 0, 0),  # 10: ret 0 (drop; jumps count from the next)
    ]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


def _open(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    try:
        prog = _filter(port)
        buf = struct.pack("HL", len(prog) // 8, _address(prog))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, buf)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind(("lo", ETH_P_IP))
        sock.settimeout(0.2)
    except BaseException:
        sock.close()
        raise
    return sock


_KEEP: list[object] = []


def _address(prog: bytes) -> int:
    import ctypes

    buf = ctypes.create_string_buffer(prog, len(prog))
    _KEEP.append(buf)  # the kernel copies the program at attach; kept anyway until exit
    return ctypes.addressof(buf)


def unavailable() -> str | None:
    """Why kernel stamps cannot be taken here (no root / CAP_NET_RAW, no ``lo``), or None."""
    try:
        _open(1).close()
    except OSError as e:
        return f"no kernel arrival stamps (AF_PACKET on lo needs root or CAP_NET_RAW): {e}"
    return None


def request_of(packet: bytes) -> tuple[str, int, int, str] | None:
    """(destination address, source port, sequence number, request line) when ``packet``
    (an IPv4 packet) carries the start of an HTTP request, else None."""
    if len(packet) < 40 or packet[0] >> 4 != 4 or packet[9] != 6:  # IPv4 TCP only
        return None
    ihl = (packet[0] & 0x0F) * 4
    sport, _dport, seq = struct.unpack_from("!HHI", packet, ihl)
    payload = packet[ihl + (packet[ihl + 12] >> 4) * 4 :]
    if not payload.startswith(METHODS):
        return None
    line = payload.split(b"\r\n", 1)[0].decode("latin-1")
    return socket.inet_ntoa(packet[16:20]), sport, seq, line


class Wire:
    """Capture requests to ``port`` on ``lo`` from construction to :meth:`close`, in a thread.
    :attr:`arrivals`: (kernel time, destination address, request line), one per request.
    ``address``: only the requests to it. The filter sees ports only, and a test running beside
    this one (another pytest-xdist process) can have a server on the same port number at
    another loopback address."""

    def __init__(self, port: int, address: str | None = None) -> None:
        self.address = address
        self.sock = _open(port)
        self.arrivals: list[tuple[float, str, str]] = []
        self.drops = 0
        self._seen: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wire", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, anc, _flags, addr = self.sock.recvmsg(SNAP, 64)
            except TimeoutError:
                continue
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            self._take(data, anc)

    def _take(self, data: bytes, anc: Iterable[tuple[int, int, bytes]]) -> None:
        got = request_of(data)
        if got is None:
            return
        dst, sport, seq, line = got
        if self.address is not None and dst != self.address:
            return
        if (dst, sport, seq) in self._seen:  # a retransmission
            return
        self._seen.add((dst, sport, seq))
        stamps = [d for level, kind, d in anc if level == socket.SOL_SOCKET and kind == 35]
        if not stamps:
            raise RuntimeError("a packet without its kernel timestamp")
        sec, nsec = struct.unpack("ll", stamps[0][:16])
        self.arrivals.append((sec + nsec / 1e9, dst, line))

    def _count_drops(self) -> None:
        _packets, drops = struct.unpack(
            "II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        )
        self.drops += drops  # reading the statistics resets them

    def snapshot(self) -> list[tuple[float, str, str]]:
        """The arrivals so far, sorted by time (drops counted up to now)."""
        self._count_drops()
        return sorted(self.arrivals)

    def close(self) -> list[tuple[float, str, str]]:
        self._stop.set()
        self._thread.join(5)
        # What the reader had not read yet is still in the buffer: read it all.
        self.sock.setblocking(False)
        while True:
            try:
                data, anc, _flags, addr = self.sock.recvmsg(SNAP, 64)
            except (BlockingIOError, OSError):
                break
            if addr[2] != PACKET_OUTGOING:
                self._take(data, anc)
        out = self.snapshot()
        self.sock.close()
        return out

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sock.fileno() >= 0:
            self.close()


def per_host(
    arrivals: Iterable[tuple[float, str, str]], hosts: dict[str, int]
) -> dict[int, list[float]]:
    """Host index (``hosts``: address -> index) -> its requests' kernel times, sorted."""
    out: dict[int, list[float]] = {}
    for t, dst, _line in arrivals:
        out.setdefault(hosts.get(dst, -1), []).append(t)
    return {h: sorted(ts) for h, ts in out.items()}


def most_in_window(times: list[float], width: float) -> int:
    """Most of ``times`` (sorted) inside any half-open window [t, t + width)."""
    return max((bisect.bisect_left(times, t + width) - i for i, t in enumerate(times)), default=0)


def early(times: list[float], interval: float, burst: int, tolerance: float) -> list[float]:
    """How early (s) each request came that a GCRA of ``interval`` and ``burst`` (the send
    gate's, gate_lib.lua) would not have let go, beyond ``tolerance``. ``times`` sorted."""
    slack, out, tat = burst * interval, [], None
    for t in times:
        if tat is not None and t < tat - slack - tolerance:
            out.append(round(tat - slack - t, 3))
        tat = t + interval if tat is None else max(tat, t) + interval
    return out


def pace(
    by_host: dict[int, list[float]], rate: float, burst: int, tolerance: float
) -> dict[str, object]:
    """Issue 31's judge over every host: ``over``, hosts with more than rate + burst requests
    in a window of 1 s less ``tolerance``; ``early``, requests early for the GCRA beyond
    ``tolerance``, and the earliest; ``max_1s``, most requests a host got in 1 s."""
    crowd = [most_in_window(ts, 1.0 - tolerance) > rate + burst for ts in by_host.values()]
    sends = [e for ts in by_host.values() for e in early(ts, 1 / rate, burst, tolerance)]
    return {
        "over": sum(crowd),
        "early": len(sends),
        "earliest": max(sends, default=0.0),
        "max_1s": max((most_in_window(ts, 1.0) for ts in by_host.values()), default=0),
    }


def lag(
    arrivals: Iterable[tuple[float, str, str]], stamps: dict[tuple[str, str], list[float]]
) -> dict[str, float]:
    """How late (ms) the server stamped requests after the kernel did: each arrival matched
    to the server's stamp of the same address and path, in order (the starved-server
    hypothesis of issue 31 in figures: median, 99th percentile, max)."""
    kernel: dict[tuple[str, str], list[float]] = {}
    for t, dst, line in arrivals:
        parts = line.split(" ")
        path = parts[1].split("?", 1)[0] if len(parts) > 2 else ""
        kernel.setdefault((dst, path), []).append(t)
    lags = sorted(
        (s - k) * 1000
        for key, ks in kernel.items()
        for k, s in zip(sorted(ks), sorted(stamps.get(key, [])), strict=False)
    )
    if not lags:
        return {}
    pick = lambda q: round(lags[min(len(lags) - 1, int(q * len(lags)))], 1)  # noqa: E731
    return {
        "stamp_lag_p50_ms": pick(0.5),
        "stamp_lag_p99_ms": pick(0.99),
        "stamp_lag_max_ms": round(lags[-1], 1),
    }
