"""The hostile web, end to end: one crawl per module (real worker processes, sites built to
hurt a crawler: sitegen.hostile_routes() plus host C of test_hostile.py), then one check per
trap, so a failing trap does not hide the others. Every URL must end in its expected final
state, with no worker dying, bounded memory, and no request outside the crawl's scope.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers
from tests.integration.test_hostile import (
    CRAWL_LIMITS,
    LIMIT,
    LONG_PATH,
    MAX_DEPTH,
    MIB,
    NEVER_REQUESTED,
    PER_HOST,
    RETRIES,
    RSS_BOUND,
    accepted,
    descendants,
    extra_routes,
    latest,
    listening,
    memory,
    path_of,
    url_of,
    wait_for_children,
)
from tests.support.processes import stop_together
from tests.support.sitegen import WRONG_CHARSET_TITLE, Request, SiteServer, hostile_routes
from tests.support.worker_logs import unexpected_tracebacks

# One costly module fixture: the module runs whole on one xdist process (tests/support/scheduling.py).
pytestmark = pytest.mark.one_process

ATTEMPTS = 1 + RETRIES
WORKER_ENV = {
    "CRAWLER_CONNECT_TIMEOUT": "1",
    "CRAWLER_READ_TIMEOUT": "2",
    "CRAWLER_TOTAL_TIMEOUT": "3",
    "CRAWLER_MAX_RETRY_AFTER": "5",
}

#: Expected final state of every URL of host A (hostile routes) and host C (extras);
#: "{a}" / "{c}" stand for the hosts' base URLs.
TABLE_A: dict[str, dict[str, Any]] = {
    "/hostile": {"status": 200, "error": None, "title": "Hostile"},
    "/wrong-charset/meta-only": {"status": 200, "error": None, "title": WRONG_CHARSET_TITLE},
    "/redirect-loop": {"status": None, "error": "too_many_redirects"},
    "/redirect-chain/5": {
        "status": 200,
        "error": None,
        "final_url": "{a}/redirect-chain/0",
        "title": "Page /redirect-chain/0",
    },
    "/redirect-to-metadata": {
        "error": "blocked_address",
        "redirects": ["http://169.254.169.254/latest/meta-data/"],
    },
    "/redirect-to-loopback": {"status": 302, "error": "redirect_out_of_scope"},
    "/slow-trickle": {"error": "timeout", "attempts": ATTEMPTS},
    "/slow-headers": {"error": "timeout", "attempts": ATTEMPTS},
    "/endless": {"status": 200, "error": None, "truncated": True, "bytes": LIMIT},
    "/gzip-bomb": {"status": 200, "error": None, "truncated": True, "bytes": LIMIT},
    "/big": {"status": 200, "error": "too_large"},
    "/big-declared": {"status": 200, "error": "too_large"},
    "/wrong-charset": {"status": 200, "error": None, "title": WRONG_CHARSET_TITLE},
    "/binary-as-html": {"status": 200, "error": None, "truncated": False},
    "/links-100k": {"status": 200, "error": None, "truncated": False},
    "/calendar/2024/01": {"status": 200, "error": None, "title": "Calendar 2024-01"},
    "/flaky": {"status": 200, "error": None},
    "/rate-limited": {"status": 200, "error": None},
    "/reset": {"error": "connection_error", "attempts": ATTEMPTS},
    "/session/start": {"status": 200, "error": None},
}
TABLE_C: dict[str, dict[str, Any]] = {
    "/extras": {"status": 200, "error": None},
    "/not-found": {"status": 404, "error": "client_error"},
    "/forbidden": {"status": 403, "error": "client_error"},
    "/always-408": {"status": 408, "error": "server_error", "attempts": ATTEMPTS},
    "/always-500": {"status": 500, "error": "server_error", "attempts": ATTEMPTS},
    "/redirect-to-flaky": {"status": 200, "error": None, "final_url": "{c}/flaky-target"},
    "/redirect-offsite": {"status": 302, "error": "redirect_out_of_scope"},
    "/redirect-dup": {"status": 302, "error": "redirect_duplicate"},
    "/json": {"status": 200, "error": None, "content_type": "application/json", "title": None},
    "/empty": {"status": 200, "error": None, "title": None, "outlinks": []},
    "/noindex": {"status": 200, "error": None, "noindex": True, "outlinks": []},
    "/x-robots": {"status": 200, "error": None, "outlinks": []},
    "/nofollow-link": {"status": 200, "outlinks": ["{c}/followed"]},
    "/followed": {"status": 200, "error": None},
    "/base-href": {"status": 200, "outlinks": ["{c}/sub/dir/page"]},
    "/sub/dir/page": {"status": 200, "error": None},
    "/repeat": {"status": 200, "outlinks": ["{c}/r/x/r/x/r/x"]},
}
DEAD_LETTER_REASONS = {
    "too_many_redirects",
    "blocked_address",
    "timeout",
    "too_large",
    "connection_error",
    "server_error",
}


@dataclass
class Hostile:
    """Everything the checks look at, taken when the crawl ended (later tests flush Redis)."""

    a: str
    c: str
    summary: dict[str, Any]
    records: dict[str, dict[str, Any]]
    raw_counts: Counter[str]
    counters: dict[str, int]
    outstanding: int
    failed: dict[str, dict[str, Any]]
    host_pages_a: int
    a_log: list[Request]
    c_log: list[Request]
    canary_log: list[Request]
    port1_hit: bool
    elapsed: float
    workers_alive: bool
    children_same: bool
    peaks: dict[str, dict[str, int]] = field(default_factory=dict)
    tracebacks: list[str] = field(default_factory=list)

    def on(self, host: str) -> dict[str, dict[str, Any]]:
        base = self.a if host == "A" else self.c
        return {path_of(u): r for u, r in self.records.items() if u.startswith(base)}


# `make test` runs this module whole on one xdist process (tests/support/scheduling.py): one crawl.
@pytest.fixture(scope="module")
def hostile(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    client = redis.Redis.from_url(redis_server)
    keys = [k for k in client.scan_iter(count=1000) if not k.startswith(b"_kombu.binding.")]
    if keys:
        client.delete(*keys)
    tmp = tmp_path_factory.mktemp("hostile")
    settings = load(env={}, broker_url=redis_server, output_dir=str(tmp / "out"))
    logs = tmp / "worker-logs"
    logs.mkdir()
    env = {**WORKER_ENV, "CRAWLER_OUTPUT_DIR": str(tmp / "out")}
    with local_workers(
        redis_server,
        redis_server,
        fetch_threads=8,
        parsers=1,
        fetchers=1,
        log_dir=str(logs),
        extra_env=env,
    ) as workers:
        try:
            yield _crawl(settings, client, workers, logs)
        finally:
            stop_together(workers)
    client.close()


def _crawl(settings, client, workers, logs: Path) -> Hostile:  # type: ignore[no-untyped-def]
    parse_worker = workers[1]
    children_before = wait_for_children(parse_worker.pid)
    canary = SiteServer(address="127.0.0.43")
    c = SiteServer(address="127.0.0.42", extra_routes=extra_routes(canary.base_url))
    with (
        listening("127.0.0.1", 0) as port1,
        SiteServer(address="127.0.0.41", extra_routes=hostile_routes(url_of(port1))) as a,
        c,
        canary,
    ):
        started = time.monotonic()
        crawl = start_crawl(
            [
                a.base_url + "/hostile",
                a.base_url + "/wrong-charset/meta-only",
                c.base_url + "/extras",
            ],
            settings=settings,
            **CRAWL_LIMITS,
            rates={"127.0.0.41": math.inf, "127.0.0.42": math.inf},
            allow_private_networks=True,  # loopback; the metadata address stays blocked
            rate=math.inf,
            concurrency=8,
            max_depth=MAX_DEPTH,
            max_pages_per_host=PER_HOST,
        )
        summary = crawl.wait(timeout=90)
        elapsed = time.monotonic() - started
        result = Hostile(
            a=a.base_url,
            c=c.base_url,
            summary=summary,
            records=latest(crawl),
            raw_counts=Counter(r["url"] for r in crawl.pages(latest=False)),
            counters=crawl.stats.counters(),
            outstanding=crawl.stats.outstanding(),
            failed={path_of(r["url"]): r for r in crawl.failed()},
            host_pages_a=int(
                client.hget(crawl.ck.for_domain("127.0.0.41").host_pages, "127.0.0.41")
            ),
            a_log=a.requests(),
            c_log=c.requests(),
            canary_log=canary.requests(),
            port1_hit=accepted(port1),
            elapsed=elapsed,
            workers_alive=all(proc.poll() is None for proc in workers),
            children_same=wait_for_children(parse_worker.pid) == children_before,
        )
    for name, proc in zip(("fetch", "parse"), workers, strict=True):
        for pid in [proc.pid, *descendants(proc.pid)]:
            result.peaks[f"{name}:{pid}"] = memory(pid)
    result.tracebacks = unexpected_tracebacks(logs, [])
    return result


def fill(value: Any, h: Hostile) -> Any:
    if isinstance(value, str):
        return value.replace("{a}", h.a).replace("{c}", h.c)
    if isinstance(value, list):
        return [fill(v, h) for v in value]
    return value


# --- the crawl as a whole ----------------------------------------------------------------------


def test_no_worker_died_and_memory_stayed_bounded(hostile: Hostile) -> None:
    assert hostile.workers_alive, "a worker process died"
    assert hostile.children_same, "a parse process was replaced"
    for name, mem in hostile.peaks.items():
        print(f"  {name}: VmRSS {mem['VmRSS'] / MIB:.0f} MiB, VmHWM {mem['VmHWM'] / MIB:.0f} MiB")
    assert max(m["VmHWM"] for m in hostile.peaks.values()) < RSS_BOUND


def test_no_worker_traceback(hostile: Hostile) -> None:
    assert hostile.tracebacks == []


def test_finished_in_time_with_one_record_per_url(hostile: Hostile) -> None:
    assert hostile.summary["status"] == "finished" and hostile.outstanding == 0
    assert hostile.raw_counts.most_common(1)[0][1] == 1
    done, admitted = hostile.summary["counters"]["done"], hostile.summary["counters"]["admitted"]
    assert done == len(hostile.records) == admitted
    assert len(hostile.on("A")) + len(hostile.on("C")) == len(hostile.records)
    assert hostile.elapsed < 90


# --- one check per trap --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "path"), [("A", p) for p in TABLE_A] + [("C", p) for p in TABLE_C]
)
def test_final_state(hostile: Hostile, host: str, path: str) -> None:
    want = {k: fill(v, hostile) for k, v in (TABLE_A if host == "A" else TABLE_C)[path].items()}
    record = hostile.on(host).get(path)
    assert record is not None, f"{path} has no final state"
    assert {k: record.get(k) for k in want} == want, record


def test_host_c_holds_exactly_the_expected_urls(hostile: Hostile) -> None:
    assert set(hostile.on("C")) == set(TABLE_C)


def test_non_html_is_recorded_not_parsed_and_cut_bodies_are_parsed(hostile: Hostile) -> None:
    on_a, on_c = hostile.on("A"), hostile.on("C")
    assert on_c["/json"]["bytes"] > 0 and "text_length" not in on_c["/json"]
    assert on_a["/endless"]["text_length"] > 0
    assert len(on_a["/links-100k"]["outlinks"]) == 5000  # max_links_per_page


def test_every_failure_is_dead_lettered_and_nothing_else(hostile: Hostile) -> None:
    expected = {
        path
        for host, table in (("A", TABLE_A), ("C", TABLE_C))
        for path in table
        if hostile.on(host)[path]["error"] in DEAD_LETTER_REASONS
    }
    assert set(hostile.failed) == expected
    assert hostile.failed["/slow-trickle"]["attempts"] == ATTEMPTS


def test_spider_traps_are_contained(hostile: Hostile) -> None:
    on_a = hostile.on("A")
    assert len(on_a) <= PER_HOST and hostile.host_pages_a == len(on_a)
    assert all(r["depth"] <= MAX_DEPTH for r in hostile.records.values())
    calendar = [p for p in on_a if p.startswith("/calendar/")]
    session = [p for p in on_a if p.startswith("/session/")]
    assert 1 <= len(calendar) <= 1 + 2 * (MAX_DEPTH - 1)
    assert 1 <= len(session) <= sum(3**d for d in range(MAX_DEPTH))
    trap_pages = re.compile(r"/(links-100k/n/\d+|calendar/\d{4}/\d\d|session/[0-9a-f]{16})")
    assert all(p in TABLE_A or trap_pages.fullmatch(p.partition("?")[0]) for p in on_a)


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("skipped:max_pages_per_host", None),
        ("skipped:trap", 1),  # /r/x/r/x/r/x
        ("skipped:out_of_domain", 1),  # the canary link
        ("skipped:redirect_out_of_scope", 2),  # to the canary, to the loopback listener
        ("skipped:redirect_duplicate", 1),
        ("links_dropped:too_many", 100_000 - 5000),
        ("links_dropped:non_http", 3),  # javascript:, mailto:, data:
        ("links_dropped:too_long", 1),
        ("links_dropped:non_html_ext", 1),
        ("links_dropped:nofollow", 3),
    ],
)
def test_counter(hostile: Hostile, name: str, n: int | None) -> None:
    got = hostile.counters.get(name, 0)
    assert got > 0 if n is None else got == n, (name, got)


def test_nothing_out_of_scope_was_requested(hostile: Hostile) -> None:
    assert hostile.canary_log == [], [r.path for r in hostile.canary_log]
    assert not hostile.port1_hit  # the redirect to the loopback listener was never followed
    c_paths = Counter(r.path for r in hostile.c_log if r.path != "/robots.txt")
    assert not set(c_paths) & {*NEVER_REQUESTED, LONG_PATH}
    hops = {"/redirect-loop/b", *(f"/redirect-chain/{i}" for i in range(5))}
    on_a = hostile.on("A")
    for r in hostile.a_log:
        if r.path != "/robots.txt":
            assert r.path in hops or r.path in on_a, r.path  # nothing but what was admitted


def test_retries_as_configured_and_nothing_fetched_twice(hostile: Hostile) -> None:
    c_paths = Counter(r.path for r in hostile.c_log if r.path != "/robots.txt")
    tried = ("/always-500", "/always-408", "/redirect-to-flaky", "/flaky-target")
    assert c_paths == {p: ATTEMPTS if p in tried else 1 for p in [*TABLE_C, "/flaky-target"]}
    a_paths = Counter(r.path for r in hostile.a_log if r.path != "/robots.txt")
    retried = {
        "/flaky": ATTEMPTS,
        "/rate-limited": 2,
        "/slow-trickle": ATTEMPTS,
        "/slow-headers": ATTEMPTS,
        "/reset": ATTEMPTS,
    }
    for path, n in a_paths.items():
        assert n == retried.get(path, 1), (path, n)


def test_retry_after_is_honoured(hostile: Hostile) -> None:
    times = sorted(r.time for r in hostile.a_log if r.path == "/rate-limited")
    assert times[1] - times[0] >= 2.9  # Retry-After: 3
