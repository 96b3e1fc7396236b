"""A private CA and a small HTTPS site signed by it, for the crawls that must trust it (or
not): ``openssl`` makes the CA and the leaf at test time; the site serves on loopback only."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PAGES = {
    "/": b'<html><body><a href="/a.html">a</a> <a href="/b.html">b</a></body></html>',
    "/a.html": b'<html><body><a href="/b.html">b</a></body></html>',
    "/b.html": b"<html><body>leaf</body></html>",
}
ROBOTS = b"User-agent: *\nAllow: /\n"


def make_ca(directory: Path, ip: str) -> dict[str, Path]:
    """``ca.pem`` (a CA no default store knows) and ``leaf.pem``/``leaf.key`` for ``ip``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=crawler test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", f"/CN={ip}")
    (directory / "ext.cnf").write_text(
        f"subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return {
        "ca": directory / "ca.pem",
        "cert": directory / "leaf.pem",
        "key": directory / "leaf.key",
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = ROBOTS if self.path == "/robots.txt" else PAGES.get(self.path)
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        self.send_response(200 if body is not None else 404)
        kind = "text/plain" if self.path == "/robots.txt" else "text/html"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, ip: str, files: dict[str, Path]) -> None:
        super().__init__((ip, 0), _Handler)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(files["cert"], files["key"])
        self.paths: list[str] = []
        self.handshakes_failed = 0

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake in the request's thread (not in accept()): a client refusing the
        # certificate fails its own connection only.
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            self.handshakes_failed += 1
            return
        super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up


@contextmanager
def https_site(ip: str, files: dict[str, Path]) -> Iterator[_TLSServer]:
    """The three pages of ``PAGES`` and a robots.txt over HTTPS on ``ip`` (a free port)."""
    server = _TLSServer(ip, files)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
