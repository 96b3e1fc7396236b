"""What a new user typed carelessly (issue 50's newcomer list): refused in one line, exit 2,
with nothing written before the check, or said plainly where it went through."""

from __future__ import annotations

import http.server
import socket
import threading

import redis

from crawler_tasks import start_crawl
from tests.support import cli_process

SEED = "http://a.example/"


def run(*args: str):  # type: ignore[no-untyped-def]
    return cli_process.run(*args, timeout=60)


def _one_line_exit_2(result, words: str) -> None:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_a_schedule_of_an_existing_name_is_replaced_only_when_asked(redis_url):
    client = redis.Redis.from_url(redis_url)
    add = ("schedule", "add", "nightly", SEED, "--broker", redis_url)
    assert run(*add, "--every-hours", "24").returncode == 0
    stored = client.hget("crawler:schedules", "nightly")
    _one_line_exit_2(run(*add, "--every-hours", "2"), "schedule 'nightly' exists (--replace")
    assert client.hget("crawler:schedules", "nightly") == stored
    replaced = run(*add, "--every-hours", "2", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert b'"every_hours": 2.0' in client.hget("crawler:schedules", "nightly")


class _V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Site(http.server.BaseHTTPRequestHandler):
    PAGES = {"/": b'<a href="/b.html">b</a>', "/b.html": b"<p>b</p>"}

    def do_GET(self) -> None:
        body = self.PAGES.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_ipv6_loopback_seed_is_crawled(settings, celery_worker):  # type: ignore[no-untyped-def]
    """`http://[::1]:PORT/` failed with "invalid allowed domain '::1'", an option never given."""
    server = _V6Server(("::1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        seed = f"http://[::1]:{server.server_address[1]}/"
        crawl = start_crawl([seed], settings=settings, allow_private_networks=True,
                            rates={"::1": float("inf")})  # fmt: skip
        summary = crawl.wait(timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert summary["status"] == "finished", summary
    assert summary["counters"]["done"] == 2 and not summary["counters"].get("failed"), summary
