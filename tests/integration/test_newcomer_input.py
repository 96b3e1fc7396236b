"""What a new user typed carelessly (issue 50's newcomer list): refused in one line, exit 2,
with nothing written before the check, or said plainly where it went through."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import warnings

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.errors import BrokerUnreachable, InvalidSeed, NoWorkers, UnknownCrawl
from crawler_tasks.settings import load
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.workers import Heartbeat
from crawler_tasks.surface.crawl import Crawl
from crawler_tasks.surface.crawl_command import _has_crawl_workers
from crawler_tasks.surface.embedded import free_port
from tests.support import cli_process
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

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


def test_the_pace_line_says_the_pace_set_rate_and_set_ceiling_give(
    redis_url, celery_worker, tmp_path
):  # type: ignore[no-untyped-def]
    """Under a cluster-wide set-rate of 8 and a ceiling of 3, each crawl said `pace: 1
    request/s per host`: it says 3 for that host now, and why."""
    wait_until(lambda: _has_crawl_workers(load(env={}, broker_url=redis_url)), timeout=60)
    broker = ("--broker", redis_url)
    with running_sites(["127.0.0.51", "127.0.0.52"], 3, 2) as (_, servers):
        assert run("set-rate", "127.0.0.51", "8", *broker).returncode == 0
        assert run("set-ceiling", "127.0.0.51", "3", *broker).returncode == 0
        seeds = [server.base_url + "/" for server in servers]
        result = run("crawl", *seeds, "--allow-private-networks", "--output", str(tmp_path),
                     "--max-pages", "2", *broker)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("pace:")]
    assert line.startswith(
        "pace: 3 request/s for 127.0.0.51 (crawler set-rate 8, set-ceiling 3, shared by every "
        "crawl of it); 1 request/s per other host (politeness;"
    ), line


@pytest.mark.parametrize(
    "seed", ["http://a.example/p/1.html\nhttp://a.example/p/2.html", "http://a.example/a b"]
)
def test_a_seed_with_white_space_inside_is_refused(seed, settings, client):  # type: ignore[no-untyped-def]
    """It became one bogus URL (/p/1.html%0Ahttp://...) and a crawl of nothing."""
    with pytest.raises(InvalidSeed, match="white space inside: one URL per seed"):
        start_crawl(seed, settings=settings)
    with pytest.raises(ValueError, match="white space inside"):
        start_crawl([SEED, seed], settings=settings)
    assert not list(client.scan_iter("crawler:*"))
    assert start_crawl(f"  {SEED}\n", settings=settings).options.seeds == (SEED,)


LONG = "x" * 100_000


@pytest.mark.parametrize(
    "args",
    [
        ("status", LONG),
        ("cancel", LONG),
        ("forget", LONG),
        ("schedule", "remove", LONG),
        ("set-rate", LONG, "5"),
        ("crawl", f"http://a.example/{LONG} b"),
        ("crawl", SEED, "--header", LONG),
        ("crawl", SEED, "--option", f"{LONG}=1"),
    ],
    ids=lambda args: " ".join(a[:20] for a in args),
)
def test_user_input_echoed_in_an_error_is_cut(args, redis_url):  # type: ignore[no-untyped-def]
    """A 100,000-character crawl id was echoed whole in every error line (100 KB on stderr)."""
    result = run(*args, "--broker", redis_url)
    assert result.returncode == 2, result.stderr[:300]
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(result.stderr) < 1100 and "more characters)" in result.stderr, result.stderr[:300]


def test_the_python_api_cuts_echoed_input_too(settings):  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownCrawl) as unknown:
        Crawl(LONG, settings=settings).pause()
    with pytest.raises(InvalidSeed) as seed:
        start_crawl(f"http://a.example/{LONG} b", settings=settings)
    for error in (unknown.value, seed.value):
        assert len(str(error)) < 300 and "(99,9" in str(error), str(error)[:300]


def test_a_misspelt_crawler_variable_is_named_with_the_one_meant(redis_url):
    """CRAWLER_DEFAULT_RAET=5 was ignored without a word; with CRAWLER_BROKER_URl, `crawler
    list` read someone else's Redis and printed `no crawls` without naming it."""
    env = {**os.environ, "CRAWLER_DEFAULT_RAET": "5", "CRAWLER_BROKER_URl": redis_url}
    result = cli_process.run("list", "--broker", redis_url, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: CRAWLER_BROKER_URl is not a crawler setting: ignored (did you mean "
        "CRAWLER_BROKER_URL?)",
        "warning: CRAWLER_DEFAULT_RAET is not a crawler setting: ignored (did you mean "
        "CRAWLER_DEFAULT_RATE?)",
        f"no crawls at {redis_url}",
    ]


def test_start_crawl_with_nothing_at_its_broker_raises_the_projects_error():
    """It raised redis-py's raw ConnectionError; the CLI says it in one line."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(BrokerUnreachable, match="connection refused: nothing listens there"):
        start_crawl([SEED], broker=dead)


def test_start_crawl_with_no_worker_says_so(settings, client):  # type: ignore[no-untyped-def]
    """It returned a 'running' crawl nobody serves without a word (the CLI starts local
    workers or refuses --no-wait). The crawl is kept: workers started later pick it up."""
    with pytest.warns(NoWorkers, match="no worker process runs at .*: it waits until workers"):
        crawl = start_crawl([SEED], settings=settings, client=client)
    assert crawl.progress()["status"] == "running"


def test_start_crawl_with_a_living_worker_is_silent(settings, client):  # type: ignore[no-untyped-def]
    """A process's real heartbeat (what every worker process runs) is enough: no warning."""
    beat = Heartbeat(client, Keys(settings.key_prefix), "fetch1@test")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", NoWorkers)
            start_crawl([SEED], settings=settings, client=client)
    finally:
        beat.stop()
