"""Hostile input, secure defaults. The hostile-web crawl itself (host C's pages below plus
sitegen.hostile_routes()) is tests/integration/test_hostile_web.py: one crawl, one check per trap.

Also here: the dead-letter round trip (``crawler failed`` / ``crawler retry-failed``), the SSRF
guard on a name resolving to loopback, and a broker password that must never leak.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.errors import InvalidSeed
from crawler_tasks.settings import load
from crawler_tasks.surface.crawl import Crawl
from crawler_tasks.surface.embedded import (
    local_workers,
    private_redis,
)
from crawler_tasks.worker.runtime.context import Context
from crawler_tasks.worker.runtime.handoff import Publisher
from crawler_tasks.worker.visit import pipeline
from tests.support.paths import RESOLVER
from tests.support.sitegen import (
    Handler,
    SiteServer,
    running_sites,
)

MIB = 1 << 20
LIMIT = 6 * MIB  # max_body_bytes: /links-100k (5.1 MiB) fits, /endless and the bomb do not
MAX_DEPTH = 4
PER_HOST = 60  # max_pages_per_host
RETRIES = 2  # max_retries: a retryable URL is tried 1 + RETRIES times
RSS_BOUND = 512 * MIB  # generous: a worker process peaks far below (printed by the test)


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {
        "CRAWLER_CONNECT_TIMEOUT": "1",
        "CRAWLER_READ_TIMEOUT": "2",
        "CRAWLER_TOTAL_TIMEOUT": "3",
        "CRAWLER_MAX_RETRY_AFTER": "5",
    }


#: What changes a crawl's output is the crawl's own option (fixed when it starts).
CRAWL_LIMITS = {
    "max_body_bytes": LIMIT,
    "max_retries": RETRIES,
    "retry_backoff": 0.2,
    "retry_backoff_max": 1.0,
    "timeout": 3.0,  # the crawl's own (CRAWLER_TOTAL_TIMEOUT is read where the crawl starts)
}


# --- helpers ----------------------------------------------------------------------------------


def html(title: str, body: str = "", head: str = "") -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title>{head}</head>"
        f"<body><h1>{title}</h1>{body}</body></html>"
    ).encode()


def anchors(*hrefs: str, rel: str | None = None) -> str:
    extra = f' rel="{rel}"' if rel else ""
    return "".join(f'<a href="{escape(h)}"{extra}>{escape(h[:40])}</a>\n' for h in hrefs)


def fail_first(n: int, status: int = 500) -> Callable[[Handler], None]:
    """A route answering ``status`` to its first ``n`` requests, then a page."""

    def route(h: Handler) -> None:
        with h.site.state_lock:
            seen = h.site.state[h.path] = h.site.state.get(h.path, 0) + 1
        if seen <= n:
            h.send_body(status, b"<html><body>try again</body></html>")
        else:
            h.send_body(200, html(f"Page {h.path_only}"))

    return route


def latest(crawl: Crawl) -> dict[str, dict[str, Any]]:
    """url -> the last record written for it (a replayed URL has two)."""
    out: dict[str, dict[str, Any]] = {}
    for record in sorted(crawl.pages(), key=lambda r: r.get("fetched_at") or 0):
        out[record["url"]] = record
    return out


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def memory(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in bytes, from /proc (psutil is not a dependency)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(value.split()[0]) * 1024
    return values


def path_of(url: str) -> str:
    return "/" + url.split("://", 1)[1].partition("/")[2]


@contextlib.contextmanager
def listening(address: str, port: int) -> Iterator[socket.socket]:
    """A bare listening socket (a canary: nothing may connect). Fails the test if it cannot
    bind: without it, "nothing connected" would check nothing."""
    sock = socket.socket()
    try:
        sock.bind((address, port))
        sock.listen(8)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        pytest.fail(f"cannot listen on {address}:{port} ({exc})", pytrace=False)
    try:
        yield sock
    finally:
        sock.close()


def url_of(sock: socket.socket) -> str:
    address, port = sock.getsockname()[:2]
    return f"http://{address}:{port}/"


def accepted(sock: socket.socket) -> bool:
    """Did anything connect (a closed connection stays in the accept queue too)?"""
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


# --- the extra hostile site (host C) ------------------------------------------------------------


EXTRA_ENTRIES = (
    "/not-found",
    "/forbidden",
    "/always-408",
    "/always-500",
    "/redirect-to-flaky",
    "/redirect-offsite",
    "/redirect-dup",
    "/json",
    "/empty",
    "/noindex",
    "/x-robots",
    "/nofollow-link",
    "/base-href",
    "/repeat",
)
NEVER_REQUESTED = (
    "/must-not-follow-1",
    "/must-not-follow-2",
    "/must-not-follow-3",
    "/json-link",
    "/r/x/r/x/r/x",
    "/photo.jpg",
)
LONG_PATH = "/long/" + "a" * 3000  # above max_url_length: dropped by the parser


def extra_routes(canary: str) -> dict[str, Callable[[Handler], None]]:
    def page(body: str = "", head: str = "", **headers: str) -> Callable[[Handler], None]:
        return lambda h: h.send_body(200, html(f"Page {h.path_only}", body, head), headers=headers)

    index = anchors(
        *EXTRA_ENTRIES,
        f"{canary}/linked",  # out of scope: never requested
        "javascript:alert(1)",
        "mailto:someone@example.org",
        "data:text/html,<a href=/x>x</a>",
        LONG_PATH,
        "/photo.jpg",  # non-HTML extension: not worth a request
    )
    return {
        "/extras": page(index),
        "/not-found": lambda h: h.send_body(404, html("Not found")),
        "/forbidden": lambda h: h.send_body(403, html("Forbidden")),
        "/always-408": lambda h: h.send_body(408, html("Request Timeout")),
        "/always-500": lambda h: h.send_body(500, html("Internal Server Error")),
        "/redirect-to-flaky": lambda h: h.redirect("/flaky-target"),
        "/flaky-target": fail_first(RETRIES),
        "/redirect-offsite": lambda h: h.redirect(f"{canary}/redirected"),
        "/redirect-dup": lambda h: h.redirect("/extras"),
        "/json": lambda h: h.send_body(
            200, b'{"html": "<a href=\\"/json-link\\">x</a>"}', "application/json"
        ),
        "/empty": lambda h: h.send_body(200, b""),
        "/noindex": page(
            anchors("/must-not-follow-1"), '<meta name="robots" content="noindex, nofollow">'
        ),
        "/x-robots": page(anchors("/must-not-follow-2"), **{"X-Robots-Tag": "nofollow"}),
        "/nofollow-link": page(
            anchors("/must-not-follow-3", rel="nofollow") + anchors("/followed")
        ),
        "/followed": page(),
        "/base-href": page(anchors("page"), '<base href="/sub/dir/">'),
        "/sub/dir/page": page(),
        "/repeat": page(anchors("/r/x/r/x/r/x")),
    }


# --- the crawl --------------------------------------------------------------------------------


def wait_for_children(pid: int, timeout: float = 30) -> list[int]:
    """The pool's children once they have been the same for a second (a starting worker may
    still be replacing its first ones)."""
    deadline = time.monotonic() + timeout
    last: list[int] = []
    while time.monotonic() < deadline:
        children = sorted(descendants(pid))
        if children and children == last:
            return children
        last = children
        time.sleep(1.0)
    raise AssertionError(f"process {pid} has no stable child process")


# --- dead letters ---------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_failed_url_is_replayed_once_fixed(settings, workers):  # type: ignore[no-untyped-def]
    fixed = threading.Event()

    def toggle(h: Handler) -> None:
        if fixed.is_set():
            h.send_body(200, html("Fixed"))
        else:
            h.send_body(500, html("Broken"))

    routes = {
        "/": lambda h: h.send_body(200, html("Home", anchors("/toggle", "/ok"))),
        "/toggle": toggle,
        "/ok": lambda h: h.send_body(200, html("OK")),
    }
    with SiteServer(address="127.0.0.44", extra_routes=routes) as site:
        crawl = start_crawl(
            [site.base_url + "/"],
            settings=settings,
            **CRAWL_LIMITS,
            rates={"127.0.0.44": math.inf},
            allow_private_networks=True,
            rate=math.inf,
            concurrency=4,
        )
        crawl.wait(timeout=60)
        progress = crawl.progress()
        assert (progress["done"], progress["failed"], progress["outstanding"]) == (3, 1, 0)
        listed = cli("failed", crawl.id, "--broker", settings.broker_url)
        assert listed.returncode == 0, listed.stderr
        (dead,) = [json.loads(line) for line in listed.stdout.splitlines()]
        assert dead["url"] == site.base_url + "/toggle"
        assert (dead["error"], dead["status"], dead["attempts"]) == ("server_error", 500, 3)

        fixed.set()
        replay = cli("retry-failed", crawl.id, "--broker", settings.broker_url)
        assert replay.returncode == 0, replay.stderr
        assert "1 URLs requeued" in replay.stdout
        crawl.wait(timeout=60)
        toggled = [r for r in site.requests() if r.path == "/toggle"]

    progress = crawl.progress()
    assert progress["status"] == "finished"
    assert (progress["done"], progress["failed"], progress["outstanding"]) == (3, 0, 0)
    assert crawl.stats.counters().get("failed:server_error", 0) == 0
    assert crawl.failed() == []
    records = latest(crawl)
    assert len(records) == 3
    assert records[site.base_url + "/toggle"]["status"] == 200
    assert records[site.base_url + "/toggle"]["error"] is None
    assert len(toggled) == 3 + 1


# --- SSRF guard -----------------------------------------------------------------------------------


def test_private_seeds_need_the_explicit_permission(settings):  # type: ignore[no-untyped-def]
    for seed in (
        "http://127.0.0.1:8080/",
        "http://localhost/",
        "http://[::1]/",
        "http://10.1.2.3/",
    ):
        with pytest.raises(InvalidSeed):
            start_crawl([seed], settings=settings)


LOOPBACK_NAME = "intranet.loopback.test"  # resolves to 127.0.0.1 in the workers, nowhere else


@pytest.mark.parametrize(
    "worker_env",
    [
        {
            "PYTHONPATH": str(RESOLVER),
            "TEST_RESOLVER_HOSTS": f"{LOOPBACK_NAME}=127.0.0.1",
        }
    ],
)
def test_name_resolving_to_loopback_is_blocked(settings, workers):  # type: ignore[no-untyped-def]
    name = LOOPBACK_NAME
    routes = {"/": lambda h: h.send_body(200, html("Private"))}
    with SiteServer(address="127.0.0.1", extra_routes=routes) as site:
        seed = f"http://{name}:{site.port}/"
        common = {"settings": settings, "rates": {name: math.inf}, "obey_robots": False}
        public = start_crawl([seed], **common)  # looks public: a name, not a literal
        public.wait(timeout=30)
        assert site.requests() == []
        private = start_crawl([seed], allow_private_networks=True, **common)
        private.wait(timeout=30)
    (blocked,) = public.pages()
    assert (blocked["error"], blocked["status"]) == ("blocked_address", None)
    assert "127.0.0.1" in blocked["detail"]
    # The same name, allowed: the workers did resolve it to the test server.
    (allowed,) = private.pages()
    assert (allowed["status"], allowed["title"]) == (200, "Private")


# --- secrets --------------------------------------------------------------------------------------


@pytest.fixture
def password_redis() -> Iterator[tuple[str, str]]:
    """A redis-server of its own that requires a password: (url with the password, password)."""
    password = "pw-" + os.urandom(12).hex()
    with private_redis(password) as url:
        yield url, password


class Monitor(threading.Thread):
    """Every command the Redis server executes (MONITOR), as raw text."""

    def __init__(self, port: int, password: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(f"AUTH {password}\r\nMONITOR\r\n".encode())
        self.chunks: list[bytes] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                data = self.sock.recv(1 << 16)
                if not data:
                    return
                self.chunks.append(data)

    def stop(self) -> str:
        self.stopping.set()
        self.join(5)
        self.sock.close()
        return b"".join(self.chunks).decode("utf-8", "replace")


def decoded_payloads(text: str) -> list[str]:
    """Kombu message bodies (task args, events) are base64 inside JSON: decode every token."""
    out = []
    for token in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        with contextlib.suppress(binascii.Error, ValueError):
            out.append(base64.b64decode(token + "=" * (-len(token) % 4)).decode("utf-8", "replace"))
    return out


def test_broker_password_never_leaks(password_redis, tmp_path: Path, worker_logs: Path) -> None:
    url, password = password_redis
    settings = load(env={}, broker_url=url, output_dir=str(tmp_path / "out"))
    monitor = Monitor(int(url.rsplit(":", 1)[1].split("/")[0]), password)
    monitor.start()
    log_dir = worker_logs
    with (
        running_sites(["127.0.0.46"], 12, 3) as (_, servers),
        local_workers(
            url,
            url,
            fetch_threads=2,
            parsers=1,
            log_dir=str(log_dir),
        ) as procs,
    ):
        crawl = start_crawl(
            [servers[0].base_url + "/"],
            settings=settings,
            rates={"127.0.0.46": math.inf},
            allow_private_networks=True,
            rate=math.inf,
        )
        crawl.wait(timeout=60)
        pids = [pid for proc in procs for pid in (proc.pid, *descendants(proc.pid))]
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().decode() for pid in pids]
    commands = monitor.stop()
    logs = {p.name: p.read_text(errors="replace") for p in log_dir.glob("*.log")}
    outputs = {
        p.name: p.read_bytes().decode(errors="replace")
        for p in (tmp_path / "out").rglob("*")
        if p.is_file()
    }

    payloads = decoded_payloads(commands)
    # The haystacks are real: task messages with their arguments, the banner, the output.
    assert any(crawl.id in p for p in payloads), "no task arguments seen"
    assert "crawl.fetch" in commands and "LPUSH" in commands.upper()
    assert any("transport" in text for text in logs.values())  # Celery's banner
    assert any(name.startswith("pages-") for name in outputs)
    for where, text in [
        ("redis commands", commands),
        *(("payload", p) for p in payloads),
        *logs.items(),
        *outputs.items(),
        *(("cmdline", c) for c in cmdlines),
    ]:
        assert password not in text, f"password leaked in {where}"


# --- in-process: the per-host cap and the last-resort final state --------------------------------


@pytest.fixture
def context(settings) -> Iterator[Context]:  # type: ignore[no-untyped-def]
    ctx = Context(settings, Publisher(), lambda *a: None)
    yield ctx
    ctx.close()


def test_max_pages_per_host_counts_seeds_and_never_duplicates(settings, context, client):  # type: ignore[no-untyped-def]
    base = "http://127.0.0.47:8000"
    crawl = start_crawl(
        [base + "/"], settings=settings, allow_private_networks=True, max_pages_per_host=5
    )
    store = context.store(crawl.id)
    assert store is not None and store.opts.max_pages_per_host == 5
    counter = crawl.ck.for_domain("127.0.0.47").host_pages
    first = [f"{base}/a{i}" for i in range(2)]
    assert store.admission.links(first, 1) == {}
    assert int(client.hget(counter, "127.0.0.47")) == 3  # the seed counts
    # 2 seen + 5 new for 2 free places: the seen ones take no place, 3 new ones are turned away
    more = first + [f"{base}/b{i}" for i in range(5)]
    assert store.admission.links(more, 1) == {"skipped:max_pages_per_host": 3, "discovered": 3}
    assert int(client.hget(counter, "127.0.0.47")) == 5
    assert store.admission.links([base + "/c"], 1) == {
        "skipped:max_pages_per_host": 1,
        "discovered": 1,
    }
    counters = crawl.stats.counters()
    assert (counters["admitted"], counters["deduplicated"]) == (5, 2)
    assert crawl.stats.outstanding() == 5


def test_a_bug_still_gives_the_url_a_final_state(settings, context, monkeypatch):  # type: ignore[no-untyped-def]
    crawl = start_crawl(
        ["http://127.0.0.47:9/"], settings=settings, allow_private_networks=True, obey_robots=False
    )
    ((_, depth, url),) = crawl.store.frontier.release_all(10, 180).entries

    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(context.fetcher, "get", bug)
    assert pipeline.fetch_url(context, crawl.id, url, depth) == "internal_error"
    assert crawl.status == "finished"
    (record,) = crawl.pages()
    assert record["error"] == "internal_error" and "RuntimeError: a bug" in record["detail"]
    assert [r["url"] for r in crawl.failed()] == [url]
    assert pipeline.fetch_url(context, crawl.id, url, depth) == "duplicate"
