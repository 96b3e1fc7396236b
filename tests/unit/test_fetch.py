"""Tests of ``crawler_tasks.web.fetcher`` and ``crawler_tasks.web.netguard`` against real local servers.

Every server listens on a loopback address (127.0.0.x); nothing leaves the machine. Each server
logs the requests it received, so a test can prove a request never reached it.
"""

from __future__ import annotations

import gzip
import http.server
import json
import random
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from crawler_tasks.errors import (
    BlockedAddress,
    ConnectionFailed,
    FetchTimeout,
    TLSError,
    TooLarge,
    TooManyRedirects,
    UnsupportedScheme,
)
from crawler_tasks.settings import Settings
from crawler_tasks.web import body, deadline, netguard
from crawler_tasks.web.deadline import Deadline
from crawler_tasks.web.fetcher import Fetcher
from crawler_tasks.web.netguard import check_host, is_allowed_address, is_public_address
from crawler_tasks.web.pinning import tls_context

MIB = 1024 * 1024
LIMIT = MIB  # max_body_bytes of the default test fetcher
PAGE = b"<html><body>hello</body></html>"
BOMB_SIZE = 128 * MIB  # what the decompression bombs inflate to
#: A page of words (~400 KB, ~2.5x smaller in gzip): its compressed body spans several reads.
_WORDS = random.Random(7)
TEXT = " ".join(f"w{_WORDS.randrange(3000)}" for _ in range(70_000)).encode()


def _coded(coding: str, data: bytes) -> bytes:
    """``data`` in a content coding ("deflate": zlib-wrapped; "raw-deflate": as some servers
    send "deflate", no zlib header; "x-gzip": gzip under its old name)."""
    if coding in ("gzip", "x-gzip"):
        return gzip.compress(data, 6, mtime=0)
    if coding == "br":
        import brotli

        return bytes(brotli.compress(data))
    wbits = -zlib.MAX_WBITS if coding == "raw-deflate" else zlib.MAX_WBITS
    comp = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return comp.compress(data) + comp.flush()


# --- the test server --------------------------------------------------------------------------


def _bomb(wbits: int) -> bytes:
    """BOMB_SIZE zero bytes compressed (gzip for wbits=31, zlib "deflate" for 15)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MIB)
    return b"".join(comp.compress(zeros) for _ in range(BOMB_SIZE // MIB)) + comp.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is exercised
    disable_nagle_algorithm = True
    server: TestServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.log.append((self.path, self.headers.get("Host", "")))
        parts = urlsplit(self.path)
        name = parts.path.strip("/").split("/")[0].replace("-", "_")
        route = getattr(self, "route_" + name, None)
        try:
            if route is None:
                self.reply(404, b"not found")
            else:
                route(parts.path.strip("/").split("/")[1:], parse_qs(parts.query))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client gave up, as the test wanted

    def reply(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        fields = {name.replace("_", "-"): value for name, value in headers.items()}
        fields.setdefault("Content-Type", "text/html; charset=utf-8")
        fields.setdefault("Content-Length", str(len(body)))
        for name, value in fields.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str, status: int = 302) -> None:
        self.reply(status, b"moved", Location=location)

    # routes: /name/arg1/arg2?query
    def route_page(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.reply(200, PAGE)

    def route_echo(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.reply(200, json.dumps(dict(self.headers.items())).encode(), Content_Type="text/plain")

    def route_status(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.reply(int(args[0]), b"status page", Retry_After="7")

    def route_gzip(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.reply(200, gzip.compress(PAGE), Content_Encoding="gzip")

    def route_coded(self, args: list[str], query: dict[str, list[str]]) -> None:
        """TEXT (or ``?random=N`` incompressible bytes) in coding ``args[0]``, chunked when
        ``args[1:] == ["chunked"]``."""
        data = random.Random(3).randbytes(int(query["random"][0])) if query else TEXT
        body = _coded(args[0], data)
        coding = "deflate" if args[0] == "raw-deflate" else args[0]
        if args[1:] != ["chunked"]:
            self.reply(200, body, Content_Encoding=coding)
            return
        self.send_response(200)
        self.send_header("Content-Encoding", coding)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), 5000):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(body[i : i + 5000]), body[i : i + 5000]))
        self.wfile.write(b"0\r\n\r\n")

    def route_bytes(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.reply(200, b"x" * int(args[0]), Content_Type="application/octet-stream")

    def route_redirect(self, args: list[str], query: dict[str, list[str]]) -> None:
        hops = int(args[0])
        self.redirect(f"/redirect/{hops - 1}" if hops > 0 else "/x/../page", 301)

    def route_loop(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.redirect("/loop/b" if args[0] == "a" else "/loop/a")

    def route_to(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.redirect(query["u"][0])

    def route_trickle_body(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        for _ in range(1000):
            self.wfile.write(b"x")
            time.sleep(0.2)

    def route_trickle_headers(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(1000):
            self.wfile.write(b"X-Slow: y\r\n"[_ % 11 : _ % 11 + 1])
            time.sleep(0.2)

    def route_chunked(self, args: list[str], query: dict[str, list[str]]) -> None:
        """``n`` bytes in chunks of 64 KiB, no Content-Length."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        left, chunk = int(args[0]), b"y" * 65536
        while left > 0:
            part = chunk[: min(left, len(chunk))]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            left -= len(part)
        self.wfile.write(b"0\r\n\r\n")

    def route_endless(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Connection", "close")  # body delimited by the end of the connection
        self.end_headers()
        chunk = b"z" * 65536
        while True:
            self.wfile.write(chunk)

    def route_huge_length(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(10**9))
        self.end_headers()
        self.wfile.write(b"a" * 1024)
        self.connection.settimeout(5)
        self.rfile.read(1)  # until the client hangs up
        self.close_connection = True

    def route_bomb(self, args: list[str], query: dict[str, list[str]]) -> None:
        encoding = args[0]
        self.reply(200, self.server.bombs[encoding], Content_Encoding=encoding)

    def route_reset(self, args: list[str], query: dict[str, list[str]]) -> None:
        if args and args[0] == "mid-body":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"partial")
            time.sleep(0.05)
        # SO_LINGER 0: close() sends a RST instead of a FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def route_bad_status(self, args: list[str], query: dict[str, list[str]]) -> None:
        self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
        self.close_connection = True


class TestServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    __test__ = False  # not a test class for pytest

    def __init__(self, host: str, port: int, bombs: dict[str, bytes]) -> None:
        super().__init__((host, port), Handler)
        self.log: list[tuple[str, str]] = []
        self.bombs = bombs
        self.sni: list[str | None] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)  # clients hanging up are expected

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str, host: str | None = None, scheme: str = "http") -> str:
        return f"{scheme}://{host or self.server_address[0]}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.log]

    def use_tls(self, cert: Path, key: Path) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.sni_callback = lambda sslsock, name, _ctx: self.sni.append(name)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {"gzip": _bomb(31), "deflate": _bomb(15)}


@pytest.fixture(scope="module")
def start_server(bombs: dict[str, bytes]) -> Iterator[Callable[..., TestServer]]:
    started: list[TestServer] = []

    def start(host: str = "127.0.0.1", port: int = 0) -> TestServer:
        server = TestServer(host, port, bombs)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def server(start_server: Callable[..., TestServer]) -> TestServer:
    return start_server()


@pytest.fixture
def make_fetcher() -> Iterator[Callable[..., Fetcher]]:
    made: list[Fetcher] = []

    def make(**overrides: Any) -> Fetcher:
        # Generous: the test's server is a thread of this process, which a busy machine
        # starves for seconds (a 2-s read timed out with two suites on 2 cores); the tests
        # about timeouts set their own.
        options: dict[str, Any] = {
            "user_agent": "test-crawler/1.0",
            "connect_timeout": 10.0,
            "read_timeout": 10.0,
            "total_timeout": 15.0,
            "max_body_bytes": LIMIT,
            "max_redirects": 5,
        }
        options.update(overrides)
        fetcher = Fetcher(**options)
        made.append(fetcher)
        return fetcher

    yield make
    for fetcher in made:
        fetcher.close()


@pytest.fixture
def fetcher(make_fetcher: Callable[..., Fetcher]) -> Fetcher:
    return make_fetcher()


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every address a socket connects to during the test."""
    seen: list[Any] = []
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        seen.append(address)
        real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """Make ``socket.getaddrinfo`` answer names in ``answers`` with their next address list
    (the last list repeats); other names and literals resolve as usual. Returns the names
    looked up, in order."""
    real = socket.getaddrinfo
    lookups: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in answers:
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        queue = answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            item
            for address in addresses
            for item in real(address, port, *args, **kwargs)
            if item[1] == socket.SOCK_STREAM
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


# --- netguard: address tables -----------------------------------------------------------------

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",  # IPv4-mapped public
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]

NOT_PUBLIC = [
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.1.1",
    "127.0.0.1",
    "127.255.0.9",
    "169.254.0.1",
    "169.254.169.254",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.0.8",
    "192.88.99.1",
    "3fff::1",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "168.63.129.16",  # Azure wire server: public space, but a platform endpoint
    "100.100.100.200",  # Alibaba metadata
    "::1",
    "::",
    "fe80::1",
    "fe80::1%1",
    "fc00::1",
    "fd00::1",
    "fd00:ec2::254",
    "fec0::1",
    "ff02::1",
    "2001:db8::1",
    "2001::1",  # Teredo
    "100::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:0:7f00:1",  # the same ::ffff:127.0.0.1, hex-written
    "::127.0.0.1",  # IPv4-compatible
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b:1::1",  # local-use NAT64
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "not-an-ip",
    "",
    "999.1.1.1",
]


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses(ip: str) -> None:
    assert is_public_address(ip)
    assert is_allowed_address(ip)


@pytest.mark.parametrize("ip", NOT_PUBLIC)
def test_non_public_addresses(ip: str) -> None:
    assert not is_public_address(ip)
    assert not is_allowed_address(ip)


@pytest.mark.parametrize(
    ("ip", "allowed"),
    [
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("192.168.0.10", True),
        ("169.254.10.10", True),
        ("100.64.1.1", True),
        ("::1", True),
        ("fe80::1", True),
        ("fd12::1", True),
        ("::ffff:127.0.0.1", True),
        ("8.8.8.8", True),
        # never, whatever the crawl allows:
        ("169.254.169.254", False),
        ("::ffff:169.254.169.254", False),
        ("fd00:ec2::254", False),
        ("169.254.170.2", False),
        ("0.0.0.0", False),
        ("::", False),
        ("224.0.0.1", False),
        ("ff02::1", False),
        ("255.255.255.255", False),
        ("garbage", False),
    ],
)
def test_allow_private_policy(ip: str, allowed: bool) -> None:
    assert is_allowed_address(ip, allow_private=True) is allowed


def test_check_host_returns_vetted_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"public.test": [["8.8.8.8", "2001:4860:4860::8888", "8.8.8.8"]]})
    assert check_host("public.test", 80) == ["8.8.8.8", "2001:4860:4860::8888"]


def test_check_host_blocks_if_any_address_is_private(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"mixed.test": [["8.8.8.8", "10.0.0.7"]]})
    with pytest.raises(BlockedAddress) as info:
        check_host("mixed.test", 443)
    assert info.value.details["addresses"] == ["10.0.0.7"]
    assert check_host("mixed.test", 443, allow_private=True) == ["8.8.8.8", "10.0.0.7"]


def test_check_host_literals_and_odd_ipv4_forms() -> None:
    assert check_host("8.8.8.8", 80) == ["8.8.8.8"]
    for host in ("127.0.0.1", "2130706433", "0x7f.1", "127.1", "::1", "169.254.169.254"):
        with pytest.raises(BlockedAddress):
            check_host(host, 80)


def test_check_host_dns_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(ConnectionFailed):
        check_host("nowhere.test", 80)


# --- fetching: normal responses -------------------------------------------------------------


def test_normal_page(fetcher: Fetcher, server: TestServer) -> None:
    url = server.url("/page")
    started = time.monotonic()
    resp = fetcher.get(url, allow_private=True)
    took = time.monotonic() - started
    assert (resp.url, resp.final_url, resp.status) == (url, url, 200)
    assert resp.body == PAGE and not resp.truncated
    assert resp.content_type == "text/html"
    assert resp.headers["content-type"] == "text/html; charset=utf-8"
    assert ("Content-Length", str(len(PAGE))) in resp.raw_headers
    assert resp.redirects == [] and resp.stop_reason is None
    assert resp.ip == "127.0.0.1"
    assert resp.http_version == "HTTP/1.1"
    assert 0 < resp.elapsed <= took  # the request's own time, not a speed claim


def test_request_headers(fetcher: Fetcher, server: TestServer) -> None:
    resp = fetcher.get(server.url("/echo"), allow_private=True, headers={"If-None-Match": '"x"'})
    sent = json.loads(resp.body)
    assert sent["User-Agent"] == "test-crawler/1.0"
    assert sent["Accept-Encoding"] in ("gzip, deflate", "gzip, deflate, br")
    assert sent["If-None-Match"] == '"x"'
    assert sent["Host"] == f"127.0.0.1:{server.port}"
    assert resp.content_type == "text/plain"


@pytest.mark.parametrize("status", [404, 410, 500, 503])
def test_every_status_is_a_response(fetcher: Fetcher, server: TestServer, status: int) -> None:
    resp = fetcher.get(server.url(f"/status/{status}"), allow_private=True)
    assert resp.status == status
    assert resp.headers["retry-after"] == "7"
    assert resp.body == b"status page"


def test_gzip_body_is_decoded(fetcher: Fetcher, server: TestServer) -> None:
    resp = fetcher.get(server.url("/gzip"), allow_private=True)
    assert resp.body == PAGE
    assert resp.headers["content-encoding"] == "gzip"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
@pytest.mark.parametrize("framing", ["", "/chunked"])
def test_a_coded_body_is_kept_as_received(
    fetcher: Fetcher, server: TestServer, coding: str, framing: str
) -> None:
    """Decoded for the crawl, and the bytes received (transfer coding removed) kept for the
    WARC (issue 32)."""
    resp = fetcher.get(server.url(f"/coded/{coding}{framing}"), allow_private=True)
    assert resp.body == TEXT and not resp.truncated
    assert resp.wire == _coded(coding, TEXT) == resp.archived
    assert len(resp.wire) < len(TEXT) // 2


def test_an_ended_coded_body_is_not_flushed(
    monkeypatch: pytest.MonkeyPatch, fetcher: Fetcher, server: TestServer
) -> None:
    """A zlib stream at its end has nothing to flush, and a flush let the GIL go (issue 32);
    a stream cut short is still flushed, and decoded as far as it goes."""
    flushes: list[bool] = []
    real = zlib.decompressobj().__class__.flush
    from urllib3.response import GzipDecoder

    def flush(self: GzipDecoder) -> bytes:
        flushes.append(self._obj.eof)
        return real(self._obj)

    monkeypatch.setattr(GzipDecoder, "flush", flush)
    resp = fetcher.get(server.url("/coded/gzip"), allow_private=True)
    assert resp.body == TEXT and resp.wire == _coded("gzip", TEXT)
    assert flushes == []
    decoder = GzipDecoder()
    coded = _coded("gzip", TEXT)
    cut = body._decode(decoder, coded[: len(coded) // 2], len(TEXT))
    cut += body._decode(decoder, b"", len(TEXT), last=True)
    assert flushes == [False] and TEXT.startswith(cut) and len(cut) > len(TEXT) // 4


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_coded_body_too_big_to_keep_twice_is_kept_decoded(
    fetcher: Fetcher, server: TestServer, coding: str
) -> None:
    """Received and decoded bytes together over the limit (incompressible data, 0.6 of it
    each): the received copy is given up, the body is whole, the WARC keeps it decoded."""
    n = int(0.6 * LIMIT)
    resp = fetcher.get(server.url(f"/coded/{coding}?random={n}"), allow_private=True)
    assert len(resp.body) == n and not resp.truncated
    assert resp.wire is None and resp.archived is resp.body


@pytest.mark.parametrize("coding", ["x-gzip", "br"])
def test_a_coding_the_warc_reader_cannot_decode_is_kept_decoded(
    fetcher: Fetcher, server: TestServer, coding: str
) -> None:
    """warcio's content_stream() leaves x-gzip coded and fails on br with Google's brotli
    module (webrecorder/warcio#73): those are decoded for the archive, as before."""
    resp = fetcher.get(server.url(f"/coded/{coding}"), allow_private=True)
    assert resp.body == TEXT and resp.wire is None and resp.archived is resp.body
    plain = fetcher.get(server.url("/page"), allow_private=True)
    assert plain.body == PAGE and plain.wire is None


def test_keep_alive_connection_is_reused(
    fetcher: Fetcher, server: TestServer, connects: list[Any]
) -> None:
    for _ in range(3):
        assert fetcher.get(server.url("/page"), allow_private=True).status == 200
    assert len(connects) == 1


# --- redirects ----------------------------------------------------------------------------------


def test_redirect_chain(fetcher: Fetcher, server: TestServer) -> None:
    resp = fetcher.get(server.url("/redirect/3"), allow_private=True)
    assert resp.status == 200 and resp.body == PAGE
    assert resp.final_url == server.url("/page")
    assert resp.redirects == [
        (301, server.url("/redirect/2")),
        (301, server.url("/redirect/1")),
        (301, server.url("/redirect/0")),
        (301, server.url("/page")),  # "/x/../page", normalised
    ]


def test_too_many_redirects(make_fetcher: Callable[..., Fetcher], server: TestServer) -> None:
    fetcher = make_fetcher(max_redirects=3)
    assert fetcher.get(server.url("/redirect/2"), allow_private=True).status == 200
    with pytest.raises(TooManyRedirects) as info:
        fetcher.get(server.url("/redirect/3"), allow_private=True)
    assert len(info.value.details["redirects"]) == 4
    assert "/page" not in server.paths()[-4:]


def test_redirect_loop(fetcher: Fetcher, server: TestServer) -> None:
    with pytest.raises(TooManyRedirects, match="loop"):
        fetcher.get(server.url("/loop/a"), allow_private=True)


@pytest.mark.parametrize(
    "location", ["ftp://example.com/file", "javascript:alert(1)", "mailto:a@example.com"]
)
def test_redirect_to_other_scheme(fetcher: Fetcher, server: TestServer, location: str) -> None:
    with pytest.raises(UnsupportedScheme):
        fetcher.get(server.url("/to?u=" + quote(location)), allow_private=True)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "data:,hi"])
def test_unsupported_scheme(fetcher: Fetcher, url: str) -> None:
    with pytest.raises(UnsupportedScheme):
        fetcher.get(url, allow_private=True)


def test_follow_callback_stops_a_redirect(fetcher: Fetcher, server: TestServer) -> None:
    asked: list[str] = []

    def follow(target: str) -> str | None:
        asked.append(target)
        return "out_of_scope" if target.endswith("/redirect/0") else None

    start = server.url("/redirect/2")
    resp = fetcher.get(start, allow_private=True, follow=follow)
    assert asked == [server.url("/redirect/1"), server.url("/redirect/0")]
    assert resp.status == 301
    assert resp.final_url == server.url("/redirect/1")
    assert resp.redirects == [(301, server.url("/redirect/1")), (301, server.url("/redirect/0"))]
    assert resp.stop_reason == "out_of_scope"
    assert resp.body == b"moved"
    assert server.paths()[-1] == "/redirect/1"  # the stopped hop was never requested


# --- the SSRF guard in get() ------------------------------------------------------------------


def test_loopback_blocked_before_any_request(
    fetcher: Fetcher, server: TestServer, connects: list[Any]
) -> None:
    before = len(server.log)
    for host in ("127.0.0.1", "localhost"):
        with pytest.raises(BlockedAddress):
            fetcher.get(server.url("/page", host=host))
    assert len(server.log) == before and connects == []


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "https://169.254.169.254/",
    ],
)
def test_metadata_always_blocked(
    fetcher: Fetcher, connects: list[Any], url: str, allow_private: bool
) -> None:
    with pytest.raises(BlockedAddress):
        fetcher.get(url, allow_private=allow_private)
    assert connects == []


def test_redirect_to_metadata_blocked_even_with_allow_private(
    fetcher: Fetcher, server: TestServer, connects: list[Any]
) -> None:
    with pytest.raises(BlockedAddress):
        fetcher.get(server.url("/to?u=http://169.254.169.254/latest/"), allow_private=True)
    assert all(address[0] == "127.0.0.1" for address in connects)


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/page",
        "http://localhost:{port}/page",
        "http://[::1]:{port}/page",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]:{port}/page",
    ],
)
def test_redirect_from_public_host_to_private_blocked(
    monkeypatch: pytest.MonkeyPatch,
    fetcher: Fetcher,
    start_server: Callable[..., TestServer],
    connects: list[Any],
    target: str,
) -> None:
    # "public.test" plays a public site: the guard vets it as public, it lives on 127.0.0.2.
    public = start_server("127.0.0.2")
    real_check = netguard.check_host

    def check(host: str, port: int, *, allow_private: bool = False, **kw: Any) -> list[str]:
        if host == "public.test":
            return ["127.0.0.2"]
        return real_check(host, port, allow_private=allow_private, **kw)

    monkeypatch.setattr(netguard, "check_host", check)
    location = quote(target.format(port=public.port), safe="")
    with pytest.raises(BlockedAddress):
        fetcher.get(public.url("/to?u=" + location, host="public.test"))
    assert public.paths() == ["/to?u=" + location]
    assert [address[0] for address in connects] == ["127.0.0.2"]


# --- pinning --------------------------------------------------------------------------------------


def test_localhost_is_pinned_to_its_resolved_address(fetcher: Fetcher, server: TestServer) -> None:
    resolved = check_host("localhost", server.port, allow_private=True)
    resp = fetcher.get(server.url("/page", host="localhost"), allow_private=True)
    assert resp.ip in resolved and resp.ip == "127.0.0.1"
    assert server.log[-1] == ("/page", f"localhost:{server.port}")


@pytest.fixture
def twin_servers(start_server: Callable[..., TestServer]) -> tuple[TestServer, TestServer]:
    """Servers on 127.0.0.2 and 127.0.0.3 with the same port (a name may resolve to either)."""
    for _ in range(20):
        first = start_server("127.0.0.2")
        try:
            return first, start_server("127.0.0.3", first.port)
        except OSError:
            continue
    pytest.skip("no port free on both 127.0.0.2 and 127.0.0.3")


def test_dns_rebinding_cannot_move_the_connection(
    monkeypatch: pytest.MonkeyPatch,
    fetcher: Fetcher,
    twin_servers: tuple[TestServer, TestServer],
) -> None:
    # The first answer is vetted; any later lookup would answer 127.0.0.3. The request must go
    # to the vetted address: urllib3 must not resolve the name again when it connects.
    first, second = twin_servers
    lookups = fake_dns(monkeypatch, {"rebind.test": [["127.0.0.2"], ["127.0.0.3"]]})
    resp = fetcher.get(first.url("/page", host="rebind.test"), allow_private=True)
    assert resp.ip == "127.0.0.2" and resp.status == 200
    assert first.log == [("/page", f"rebind.test:{first.port}")]
    assert second.log == [] and lookups == ["rebind.test"]
    # The next fetch resolves again and gets 127.0.0.3: the kept-alive connection to
    # 127.0.0.2 must not serve it (pools are keyed by address).
    resp = fetcher.get(first.url("/echo", host="rebind.test"), allow_private=True)
    assert resp.ip == "127.0.0.3"
    assert second.paths() == ["/echo"] and first.paths() == ["/page"]


def test_a_kept_connection_serves_only_the_address_it_was_pinned_to(
    monkeypatch: pytest.MonkeyPatch,
    fetcher: Fetcher,
    twin_servers: tuple[TestServer, TestServer],
    connects: list[Any],
) -> None:
    # The name moves to 127.0.0.3 and back: each address's connection is kept and reused for
    # that address only, never handed a request the guard vetted for the other.
    first, second = twin_servers
    fake_dns(monkeypatch, {"moving.test": [["127.0.0.2"], ["127.0.0.3"], ["127.0.0.2"]]})
    got = [
        fetcher.get(first.url(f"/echo?{n}", host="moving.test"), allow_private=True).ip
        for n in range(4)
    ]
    assert got == ["127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.2"]
    assert [a for a, _ in connects] == ["127.0.0.2", "127.0.0.3"]  # two connections, kept
    assert first.paths() == ["/echo?0", "/echo?2", "/echo?3"] and second.paths() == ["/echo?1"]


def test_connections_are_kept_for_many_hosts(
    monkeypatch: pytest.MonkeyPatch,
    make_fetcher: Callable[..., Fetcher],
    server: TestServer,
    connects: list[Any],
) -> None:
    # 100 hosts in turn (more than urllib3's 10 pools, or the 32 the fetcher had): the second
    # round reuses every first round's connection (it used to open 1.0 per page on 200 hosts).
    names = [f"h{n}.test" for n in range(100)]
    fake_dns(monkeypatch, {name: [["127.0.0.1"]] for name in names})
    fetcher = make_fetcher()
    for _ in range(2):
        for name in names:
            assert fetcher.get(server.url("/page", host=name), allow_private=True).status == 200
    assert len(connects) == 100


def test_the_gates_look_runs_once_just_before_the_first_request_is_written(
    make_fetcher: Callable[..., Fetcher], server: TestServer
) -> None:
    """What the send gate returns (SendSlot.recheck) is called after the connection and the
    pinning, before the request reaches the server, once per fetch (not per redirect hop),
    and the request waits for it: a thread late past a shared gate's slot asks again there."""
    fetcher = make_fetcher()
    looks: list[int] = []

    def look() -> None:
        looks.append(len(server.log))  # requests the server had received so far
        time.sleep(0.3)

    before = len(server.log)
    with fetcher.gated(lambda: look):
        started = time.monotonic()
        resp = fetcher.get(server.url("/redirect/2"), allow_private=True)
        took = time.monotonic() - started
    assert resp.status == 200 and len(resp.redirects) == 3  # 2 -> 1 -> 0 -> /page
    assert looks == [before] and took >= 0.3
    assert fetcher.get(server.url("/page"), allow_private=True).status == 200  # outside: none
    assert looks == [before]


def test_the_gates_look_comes_after_a_new_connection_is_made(
    make_fetcher: Callable[..., Fetcher], server: TestServer, connects: list[Any]
) -> None:
    """A plain connection is made in the request's first write (http.client): the look must
    come after it, not before (a connect may lose the GIL for long on a busy machine, and the
    request would then go late, close to the next one of a shared gate)."""
    fetcher = make_fetcher()
    seen: list[int] = []
    with fetcher.gated(lambda: lambda: seen.append(len(connects))):
        assert fetcher.get(server.url("/page"), allow_private=True).status == 200
    assert seen == [1] and len(connects) == 1


def test_idle_connections_are_closed(
    make_fetcher: Callable[..., Fetcher], server: TestServer, connects: list[Any]
) -> None:
    fetcher = make_fetcher(idle_seconds=0.4)
    assert fetcher.get(server.url("/page"), allow_private=True).status == 200
    time.sleep(0.2)  # idle less than 0.4 s: kept
    assert fetcher.get(server.url("/page"), allow_private=True).status == 200
    assert len(connects) == 1
    time.sleep(0.6)  # idle longer: closed by the next fetch's look, which opens a new one
    assert fetcher.get(server.url("/page"), allow_private=True).status == 200
    assert len(connects) == 2


def test_next_address_tried_when_connection_refused(
    monkeypatch: pytest.MonkeyPatch, fetcher: Fetcher, server: TestServer
) -> None:
    fake_dns(monkeypatch, {"two.test": [["127.0.0.5", "127.0.0.1"]]})
    resp = fetcher.get(server.url("/page", host="two.test"), allow_private=True)
    assert resp.ip == "127.0.0.1" and resp.status == 200


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA and a certificate for ``pinned.test`` (DNS name only, no IP) signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=fetch test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=pinned.test")
    (d / "ext.cnf").write_text(
        "subjectAltName=DNS:pinned.test\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return {"ca": d / "ca.pem", "cert": d / "leaf.pem", "key": d / "leaf.key"}


@pytest.fixture(scope="module")
def tls_server(start_server: Callable[..., TestServer], tls_files: dict[str, Path]) -> TestServer:
    server = start_server("127.0.0.2")
    server.use_tls(tls_files["cert"], tls_files["key"])
    return server


def test_tls_pinned_keeps_sni_and_verifies_hostname(
    monkeypatch: pytest.MonkeyPatch,
    make_fetcher: Callable[..., Fetcher],
    tls_server: TestServer,
    tls_files: dict[str, Path],
) -> None:
    fake_dns(monkeypatch, {"pinned.test": [["127.0.0.2"]], "other.test": [["127.0.0.2"]]})
    fetcher = make_fetcher(ca_bundle=str(tls_files["ca"]))
    url = tls_server.url("/page", host="pinned.test", scheme="https")
    resp = fetcher.get(url, allow_private=True)
    assert resp.status == 200 and resp.body == PAGE and resp.ip == "127.0.0.2"
    assert tls_server.sni[-1] == "pinned.test"
    assert tls_server.log[-1] == ("/page", f"pinned.test:{tls_server.port}")
    # Same address, but the certificate is not for that name / for the bare IP: refused.
    for host in ("other.test", "127.0.0.2"):
        with pytest.raises(TLSError, match="^certificate verify failed: (?i:hostname|ip)"):
            fetcher.get(tls_server.url("/page", host=host, scheme="https"), allow_private=True)


def test_tls_unknown_ca_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, fetcher: Fetcher, tls_server: TestServer
) -> None:
    fake_dns(monkeypatch, {"pinned.test": [["127.0.0.2"]]})
    with pytest.raises(TLSError) as failed:
        fetcher.get(tls_server.url("/", host="pinned.test", scheme="https"), allow_private=True)
    # The words of the record: not a retryable connection_error with requests' wrapping.
    assert failed.value.reason == "tls_error"
    assert str(failed.value) == (
        "certificate verify failed: unable to get local issuer certificate"
    )


def test_a_kept_tls_connection_is_not_given_its_timeout_again(
    monkeypatch: pytest.MonkeyPatch,
    make_fetcher: Callable[..., Fetcher],
    tls_server: TestServer,
    tls_files: dict[str, Path],
) -> None:
    """urllib3 sets a connection's timeout as it writes each request and as it reads each
    response; on a kept connection it is the timeout it has, and each call was an ioctl that
    let the GIL go (issue 32): the request is written under the timeout it is read with. A
    timeout that differs is still set."""
    fake_dns(monkeypatch, {"pinned.test": [["127.0.0.2"]]})
    fetcher = make_fetcher(ca_bundle=str(tls_files["ca"]), connect_timeout=8.0)
    url = tls_server.url("/page", host="pinned.test", scheme="https")
    assert fetcher.get(url, allow_private=True).status == 200
    calls: list[float | None] = []
    real = ssl.SSLSocket.settimeout

    def counted(self: ssl.SSLSocket, value: float | None) -> None:
        calls.append(value)
        real(self, value)

    monkeypatch.setattr(ssl.SSLSocket, "settimeout", counted)
    for _ in range(3):
        resp = fetcher.get(url, allow_private=True)
        assert resp.status == 200 and resp.body == PAGE
    assert calls == []
    sock = tls_context().wrap_socket(
        socket.socket(), server_hostname="pinned.test", do_handshake_on_connect=False
    )
    with sock:
        for value in (5.0, 5.0, None, 0.0, 2.5):
            sock.settimeout(value)
            assert sock.gettimeout() == value
    assert calls == [5.0, None, 0.0, 2.5]


def test_ca_bundle_adds_to_the_public_cas(tls_files: dict[str, Path]) -> None:
    # The bundle's CA is trusted, and certifi's public CAs still are (an intranet crawl also
    # fetches public sites): one context holds both.
    context = tls_context(str(tls_files["ca"]))
    subjects = {dict(x[0] for x in ca["subject"]).get("commonName") for ca in
                context.get_ca_certs()}  # fmt: skip
    assert "fetch test CA" in subjects and "ISRG Root X1" in subjects
    assert "fetch test CA" not in {
        dict(x[0] for x in ca["subject"]).get("commonName") for ca in tls_context().get_ca_certs()
    }


# --- deadlines ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/trickle-body", "/trickle-headers"])
def test_trickling_server_cut_at_total_timeout(
    make_fetcher: Callable[..., Fetcher], server: TestServer, path: str
) -> None:
    # The server sends a byte every 0.2 s for 200 s: no read timeout ever fires, only the total
    # deadline can end the fetch. Not before it, and long before the read timeout could have
    # (a margin of 4 s for a loaded machine, not a speed claim).
    fetcher = make_fetcher(total_timeout=1.0, read_timeout=5.0)
    started = time.monotonic()
    with pytest.raises(FetchTimeout):
        fetcher.get(server.url(path), allow_private=True)
    assert 1.0 - 0.02 <= time.monotonic() - started < 5.0
    # The fetcher is still usable afterwards.
    assert fetcher.get(server.url("/page"), allow_private=True).status == 200


def test_a_crawls_own_timeout_replaces_the_fetchers(
    make_fetcher: Callable[..., Fetcher], server: TestServer
) -> None:
    # The crawl option ``timeout`` (RequestProfile.fetch_args) is the total deadline of its
    # requests, whatever the process's CRAWLER_TOTAL_TIMEOUT (here 30 s).
    fetcher = make_fetcher(total_timeout=30.0, read_timeout=30.0)
    started = time.monotonic()
    with pytest.raises(FetchTimeout):
        fetcher.get(server.url("/trickle-body"), allow_private=True, timeout=1.0)
    assert 1.0 - 0.02 <= time.monotonic() - started < 10.0


def test_one_deadline_thread_expires_in_time_and_forgets_finished_ones() -> None:
    # Every fetch's deadline is one heap entry of one thread (not a thread per fetch); the
    # finished ones do not pile up until their 60 s are over.
    for _ in range(5000):
        Deadline(60.0).finish()
    assert len(deadline._WATCH._heap) < 2048
    short, later = Deadline(0.2), Deadline(0.6)
    time.sleep(0.4)
    assert short.expired and not later.expired
    later.finish()
    assert {t.name for t in threading.enumerate()}.issuperset({"fetch-deadlines"})


def test_deadline_of_one_thread_spares_the_others(
    make_fetcher: Callable[..., Fetcher], server: TestServer
) -> None:
    # Four threads fetch pages on the same fetcher for as long as the trickling fetch lasts, so
    # its deadline fires while they are mid-request, however the threads are scheduled.
    fetcher = make_fetcher(total_timeout=1.0)
    trickle_done = threading.Event()
    results: dict[str, list[object]] = {"page": [], "trickle": []}

    def run(kind: str, path: str) -> None:
        while True:
            try:
                results[kind].append(fetcher.get(server.url(path), allow_private=True).status)
            except Exception as exc:
                results[kind].append(exc)
            if kind == "trickle":
                trickle_done.set()
            if trickle_done.is_set():
                return

    threads = [threading.Thread(target=run, args=("trickle", "/trickle-body"))]
    threads += [threading.Thread(target=run, args=("page", "/page")) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results["trickle"]) == 1 and isinstance(results["trickle"][0], FetchTimeout)
    assert len(results["page"]) >= 4 and set(results["page"]) == {200}, results["page"][-5:]


def test_deadline_survives_a_fetch_inside_follow(
    make_fetcher: Callable[..., Fetcher], server: TestServer
) -> None:
    fetcher = make_fetcher(total_timeout=1.0, read_timeout=5.0)

    def follow(target: str) -> str | None:
        assert fetcher.get(server.url("/page"), allow_private=True).status == 200
        return None

    started = time.monotonic()
    with pytest.raises(FetchTimeout):
        fetcher.get(server.url("/to?u=/trickle-body"), allow_private=True, follow=follow)
    assert time.monotonic() - started < 5.0  # the trickle lasts 200 s, the read timeout 5 s


def test_no_thread_left_behind(make_fetcher: Callable[..., Fetcher], server: TestServer) -> None:
    # Each fetch arms a timer thread for its total deadline, 60 s here: one the fetch did not
    # cancel would outlive the few seconds this test waits for them to end.
    total_timeout = 60.0
    fetcher = make_fetcher(total_timeout=total_timeout)

    # Compared as sets, without the test server's per-connection handler threads (a kept-alive
    # connection keeps one alive): what is left is what the fetcher started.
    def others() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if "process_request_thread" not in t.name}

    before = others()
    for _ in range(20):
        fetcher.get(server.url("/page"), allow_private=True)
    deadline = time.monotonic() + total_timeout / 6
    for thread in others() - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert {t for t in others() - before if t.is_alive()} == set()


# --- body limits ----------------------------------------------------------------------------------


def test_body_at_the_limit_is_not_truncated(fetcher: Fetcher, server: TestServer) -> None:
    resp = fetcher.get(server.url(f"/bytes/{LIMIT}"), allow_private=True)
    assert len(resp.body) == LIMIT and not resp.truncated
    resp = fetcher.get(server.url(f"/chunked/{LIMIT}"), allow_private=True)
    assert len(resp.body) == LIMIT and not resp.truncated
    resp = fetcher.get(server.url(f"/chunked/{LIMIT + 1}"), allow_private=True)
    assert len(resp.body) == LIMIT and resp.truncated


def test_content_length_above_limit_is_too_large(fetcher: Fetcher, server: TestServer) -> None:
    started = time.monotonic()
    for path in (f"/bytes/{LIMIT + 1}", "/huge-length"):
        with pytest.raises(TooLarge):
            fetcher.get(server.url(path), allow_private=True)
    # Refused from Content-Length: /huge-length holds its connection 5 s for a client that
    # reads on (a bound of what is decided, not of speed).
    assert time.monotonic() - started < 4.5


def _fetch_measured(fetcher: Fetcher, url: str) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        resp = fetcher.get(url, allow_private=True)
        return resp, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("path", ["/endless", f"/chunked/{50 * MIB}"])
def test_long_bodies_truncated_in_bounded_memory(
    fetcher: Fetcher, server: TestServer, path: str
) -> None:
    resp, peak = _fetch_measured(fetcher, server.url(path))
    assert resp.truncated and len(resp.body) == LIMIT
    assert set(resp.body) <= {ord("y"), ord("z")}
    assert peak < 2 * LIMIT  # the body itself is LIMIT


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_decompression_bomb_truncated_in_bounded_memory(
    fetcher: Fetcher, server: TestServer, bombs: dict[str, bytes], encoding: str
) -> None:
    assert len(bombs[encoding]) < LIMIT  # so Content-Length does not refuse it first
    resp, peak = _fetch_measured(fetcher, server.url(f"/bomb/{encoding}"))
    assert resp.truncated and resp.body == bytes(LIMIT)
    assert resp.wire is None  # cut: archived decoded, as cut
    assert peak < 2 * LIMIT  # the body itself is LIMIT (how fast: a benchmark's question)


# --- connection failures ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/reset", "/reset/mid-body", "/bad-status"])
def test_broken_servers(fetcher: Fetcher, server: TestServer, path: str) -> None:
    with pytest.raises(ConnectionFailed):
        fetcher.get(server.url(path), allow_private=True)


def test_connection_refused(fetcher: Fetcher) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectionFailed):
        fetcher.get(f"http://127.0.0.1:{port}/", allow_private=True)


def test_https_to_plain_http_port(fetcher: Fetcher, server: TestServer) -> None:
    with pytest.raises(TLSError):
        fetcher.get(server.url("/page", scheme="https"), allow_private=True)


def test_from_settings() -> None:
    settings = Settings(max_body_bytes=1234, max_redirects=2, total_timeout=5.0)
    fetcher = Fetcher.from_settings(settings)
    try:
        assert fetcher._max_body_bytes == 1234
        assert fetcher._max_redirects == 2
    finally:
        fetcher.close()


def test_a_name_is_resolved_once_while_its_answer_is_kept(
    make_fetcher: Callable[..., Fetcher], server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = fake_dns(monkeypatch, {"site.test": [["127.0.0.1"]]})
    fetcher = make_fetcher(dns_seconds=60.0)
    for _ in range(3):
        resp = fetcher.get(server.url("/page", host="site.test"), allow_private=True)
        assert resp.status == 200 and resp.ip == "127.0.0.1"
    assert lookups == ["site.test"]
    # The kept answer is vetted again at each use: a crawl without private networks is
    # refused it, as it would be a fresh one.
    with pytest.raises(BlockedAddress):
        fetcher.get(server.url("/page", host="site.test"))
    assert lookups == ["site.test"]
    plain = make_fetcher(dns_seconds=0.0)  # nothing kept: every request asks
    for _ in range(2):
        assert plain.get(server.url("/page", host="site.test"), allow_private=True).status == 200
    assert lookups == ["site.test"] * 3


def test_a_kept_answer_is_asked_again_once_it_is_old(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = netguard.KeptAddresses(0.3)
    calls: list[str] = []
    real = netguard.resolve

    def counted(host: str, port: int) -> list[str]:
        calls.append(host)
        return real(host, port)

    monkeypatch.setattr(netguard, "resolve", counted)
    assert kept.check("localhost", 80, allow_private=True)
    assert kept.check("LOCALHOST", 80, allow_private=True)  # names are not case-sensitive
    assert calls == ["localhost"]
    time.sleep(0.35)
    kept.check("localhost", 80, allow_private=True)
    assert calls == ["localhost", "localhost"]
