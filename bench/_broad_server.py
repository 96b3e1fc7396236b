"""The simulated web of bench/broad.py (run as a subprocess, not a benchmark itself).

    .venv/bin/python bench/_broad_server.py --hosts 1000 --pages 21 --port PORT --log FILE
        [--tls DIR] [--real-sizes]

One asyncio process listens on ``PORT`` of every host address (``address(i)``: 127.10.x.y;
Linux routes all of 127/8 to ``lo``, so nothing needs configuring). Pages are generated on
request from the host and page number (nothing pre-rendered), so memory stays flat. Each
response waits 50-350 ms (a fixed pseudo-random latency per URL), as real servers do.

Host ``i`` serves:
* ``/robots.txt``: ``Disallow: /private/``;
* ``/`` and ``/p/K.html`` (K < pages): ``/`` links to /p/1 and /p/2; page K to pages 2K+1 and
  2K+2 of its own host (a binary tree, so every page is reachable and depths stay small),
  to ``CROSS`` pages of other hosts, and to ``/private/K.html`` (robots-disallowed);
* anything else: 404.

With ``--tls DIR`` every address serves HTTPS only, with the certificate ``DIR/block-B.pem``
(key ``DIR/leaf.key``) of its block of 250 addresses, signed by ``DIR/ca.pem`` (see
``_tls.make_certs``; no default store trusts it), and its links are ``https://``. With
``--real-sizes`` pages have the sizes of the web (log-normal: median 49 KB, 9 % above 150 kB,
at most 1 MB; fixed per URL) filled with pseudo-text that compresses like text (~3x), and are
sent gzip-compressed to clients that accept it. Connections are kept alive (HTTP/1.1) until
the client closes them.

Every request is logged to ``FILE`` as ``time<TAB>host index<TAB>kind<TAB>path<TAB>bytes``
(kind: robots, page, private, other; bytes: the body as sent), every new connection as
``time<TAB>host<TAB>conn<TAB>R<TAB>0`` (R: 1 when its TLS session was resumed, else 0) and every
0.1 s a line ``time<TAB>-1<TAB>inflight<TAB>N<TAB>0`` with the number of requests being served.
Lines are flushed every 0.2 s; ``SIGTERM`` flushes and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import math
import random
import signal
import ssl
import sys
import time
import zlib
from pathlib import Path

CROSS = 3
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
FILLER = (
    b"<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod. </p>\n"
) * 24


def address(i: int) -> str:
    """Host ``i``'s loopback address (up to 62,500 hosts)."""
    return f"127.10.{i // 250}.{i % 250 + 1}"


def latency(host: int, path: str, low: float, high: float) -> float:
    h = zlib.crc32(f"{host}{path}".encode())
    return low + (high - low) * (h % 10_000) / 10_000


#: Real sizes: log-normal around a 49 KB median; sigma so that 9 % of pages exceed 150 kB
#: (z(0.91) = 1.341: ln(150/49) / 1.341).
MEDIAN, SIGMA, MAX_SIZE = 49_000, math.log(150 / 49) / 1.341, 1_000_000


def real_size(host: int, k: int) -> int:
    rng = random.Random(zlib.crc32(f"size:{host}:{k}".encode()))
    return min(MAX_SIZE, int(MEDIAN * math.exp(SIGMA * rng.gauss(0.0, 1.0))))


def _text(n: int = 2_000_000) -> bytes:
    """Paragraphs of pseudo-words (a 3,000-word vocabulary): gzip gets ~3x out of it, as out
    of real pages, where a repeated filler would shrink to nothing."""
    rng = random.Random(1)
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(3000)]
    out, size = [], 0
    while size < n:
        para = "<p>" + " ".join(rng.choices(vocab, k=60)) + ".</p>\n"
        out.append(para)
        size += len(para)
    return "".join(out).encode()


TEXT = b""


def filler(host: int, k: int, real: bool) -> bytes:
    if not real:
        return FILLER
    size = real_size(host, k)
    start = zlib.crc32(f"at:{host}:{k}".encode()) % (len(TEXT) - MAX_SIZE)
    return TEXT[start : start + size]


def page(
    host: int, k: int, hosts: int, pages: int, port: int, scheme: str = "http", real: bool = False
) -> bytes:
    links = [f"/p/{j}.html" for j in (2 * k + 1, 2 * k + 2) if j < pages]
    links.append(f"/private/{k}.html")
    h = zlib.crc32(f"{host}:{k}".encode())
    for c in range(CROSS):
        other = (host + 1 + (h >> (c * 7)) % max(hosts - 1, 1)) % hosts
        target = (h >> (c * 5 + 3)) % pages
        path = f"/p/{target}.html" if target else "/"
        links.append(f"{scheme}://{address(other)}:{port}{path}")
    body = "".join(f'<a href="{u}">link {n}</a>\n' for n, u in enumerate(links))
    return (
        (
            f"<!doctype html><html><head><title>host {host} page {k}</title></head><body>"
            f"<h1>host {host} page {k}</h1>\n{body}"
        ).encode()
        + filler(host, k, real)
        + b"</body></html>\n"
    )


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.inflight = 0
        self.lines: list[str] = []
        self.out = open(args.log, "a", buffering=1 << 16)  # noqa: SIM115 - closed in flush()
        self.by_addr = {address(i): i for i in range(args.hosts)}

    def route(self, host: int, path: str) -> tuple[int, str, bytes, str]:
        if path == "/robots.txt":
            return 200, "text/plain", ROBOTS, "robots"
        if path.startswith("/private/"):
            return 200, "text/html", b"<html><title>private</title></html>", "private"
        k = 0 if path == "/" else -1
        if path.startswith("/p/") and path.endswith(".html") and path != "/p/0.html":
            try:
                k = int(path[3:-5])
            except ValueError:
                k = -1
        if 0 <= k < self.args.pages:
            a = self.args
            scheme = "https" if a.tls else "http"
            body = page(host, k, a.hosts, a.pages, a.port, scheme, a.real_sizes)
            return 200, "text/html; charset=utf-8", body, "page"
        return 404, "text/plain", b"not found", "other"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = self.by_addr.get(writer.get_extra_info("sockname")[0], -1)
        tls = writer.get_extra_info("ssl_object")
        reused = int(bool(tls is not None and tls.session_reused))
        self.lines.append(f"{time.time():.4f}\t{host}\tconn\t{reused}\t0\n")
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                method, _, rest = line.partition(" ")
                path = rest.rsplit(" ", 1)[0].split("?", 1)[0]
                self.inflight += 1
                t = time.time()
                status, ctype, body, kind = self.route(host, path)
                encoding = ""
                if self.args.real_sizes and _accepts_gzip(head) and len(body) > 1000:
                    # Level 1: the server's CPU is not measured, but it shares the machine.
                    body, encoding = gzip.compress(body, 1, mtime=0), "Content-Encoding: gzip\r\n"
                self.lines.append(f"{t:.4f}\t{host}\t{kind}\t{path}\t{len(body)}\n")
                try:
                    await asyncio.sleep(latency(host, path, self.args.low, self.args.high))
                finally:
                    self.inflight -= 1
                reason = "OK" if status == 200 else "Not Found"
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n{encoding}"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                )
                if method != "HEAD":
                    writer.write(body)
                await writer.drain()
                if b"connection: close" in head.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def sample(self) -> None:
        tick = 0
        while True:
            await asyncio.sleep(0.1)
            self.lines.append(f"{time.time():.4f}\t-1\tinflight\t{self.inflight}\t0\n")
            tick += 1
            if tick % 2 == 0:
                self.flush()

    def flush(self) -> None:
        if self.lines:
            self.out.write("".join(self.lines))
            self.lines = []
        self.out.flush()


def _accepts_gzip(head: bytes) -> bool:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"accept-encoding:"):
            return b"gzip" in line
    return False


def tls_contexts(directory: str | None, hosts: int) -> list[ssl.SSLContext | None]:
    """Host ``i``'s server context (one certificate per block of 250 addresses)."""
    if not directory:
        return [None] * hosts
    blocks: dict[int, ssl.SSLContext] = {}
    for b in range((hosts + 249) // 250):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(Path(directory) / f"block-{b}.pem", Path(directory) / "leaf.key")
        blocks[b] = ctx
    return [blocks[i // 250] for i in range(hosts)]


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, required=True)
    p.add_argument("--pages", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--low", type=float, default=0.05)
    p.add_argument("--high", type=float, default=0.35)
    p.add_argument("--tls", help="directory of the certificates (HTTPS only)")
    p.add_argument("--real-sizes", action="store_true", help="sizes of the web, gzip")
    args = p.parse_args()
    global TEXT
    TEXT = _text() if args.real_sizes else b""
    server = Server(args)
    contexts = tls_contexts(args.tls, args.hosts)
    servers = [
        await asyncio.start_server(
            server.handle, address(i), args.port, backlog=512, ssl=contexts[i]
        )
        for i in range(args.hosts)
    ]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    sampler = asyncio.create_task(server.sample())
    print("ready", flush=True)
    await stop.wait()
    sampler.cancel()
    for s in servers:
        s.close()
    server.flush()
    server.out.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
