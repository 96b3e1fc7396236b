"""Every mistake an operator can make with the `crawler` command gets one line on stderr naming
the problem, exit code 2, no traceback, and writes nothing to Redis (issue 9's table)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import tracemalloc

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.errors import ConfigError, UnknownCrawl
from crawler_tasks.settings import load
from crawler_tasks.state.keys import Keys
from crawler_tasks.surface.crawl import Crawl, list_crawls
from crawler_tasks.surface.crawl_command import _has_crawl_workers
from crawler_tasks.surface.embedded import free_port
from tests.support import cli_process
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


def run(*args: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    """The command in a process of its own, its imports done ahead
    (tests/support/cli_process.py)."""
    return cli_process.run(*args, timeout=timeout)


SEED = "http://a.example/"
# {live}: the test's Redis; {dead}: a closed port; {busy}: a port something listens on.
CASES = [
    # unknown crawl id
    ("status nope {live}", "nope"),
    ("status nope --json {live}", "nope"),
    ("watch nope {live}", "nope"),
    ("pause nope {live}", "nope"),
    ("resume nope {live}", "nope"),
    ("cancel nope {live}", "nope"),
    ("failed nope {live}", "nope"),
    ("retry-failed nope {live}", "nope"),
    # unreachable broker: an explicit one is never replaced by an embedded one
    ("list {dead}", "connection refused"),
    ("status someid {dead}", "connection refused"),
    ("pause someid {dead}", "connection refused"),
    ("set-rate a.example 2 {dead}", "connection refused"),
    ("schedule list {dead}", "connection refused"),
    ("metrics {dead}", "connection refused"),
    (f"crawl {SEED} {{dead}}", "connection refused"),
    ("status nope {live}", "at redis://127.0.0.1:"),
    # malformed broker URLs
    (f"crawl {SEED} --broker notaurl", "notaurl"),
    (f"crawl {SEED} --broker redis://host:notaport/0", "port"),
    ("list --broker notaurl", "notaurl"),
    ("list {tls}", "TLS mismatch: it speaks plain Redis, not TLS (use redis://)"),
    ("list --broker redis://:pa@ss@127.0.0.1:1/0", "percent-encode"),
    ("list --broker redis://:pa/ss@127.0.0.1:1/0", "percent-encode"),
    # crawl options
    (f"crawl {SEED} --rate a.example=0 {{live}}", "rate"),
    (f"crawl {SEED} --rate a.example=fast {{live}}", "HOST=RATE"),
    (f"crawl {SEED} --max-depth -1 {{live}}", "max_depth"),
    (f"crawl {SEED} --max-pages -5 {{live}}", "max_pages"),
    (f"crawl {SEED} --concurrency 0 {{live}}", "concurrency"),
    (f"crawl {SEED} --concurrency -1 {{live}}", "concurrency"),
    (f"crawl {SEED} --default-rate 0 {{live}}", "rate"),
    (f"crawl {SEED} --default-rate -2 {{live}}", "rate"),
    (f"crawl {SEED} --include [unclosed {{live}}", "regex"),
    ("crawl 'http://a.example/1 http://a.example/2' {live}", "white space inside: one URL per"),
    (f"crawl {SEED} --cookie 127.0.0.1:session=abc {{live}}", "--cookie HOST:NAME=env:NAME"),
    (f"crawl {SEED} --user-agent '' {{live}}", "user_agent is empty: leave it out"),
    (f"crawl {SEED} --no-wait --embedded {{live}}", "--no-wait"),
    # crawl --option KEY=JSON
    (f"crawl {SEED} --max-depth 3 --option max_depth=2 {{live}}", "--max-depth"),
    (f"crawl {SEED} --default-rate 2 --option rate=3 {{live}}", "--default-rate"),
    (f"crawl {SEED} --rate a.example=2 --option rates={{{{}}}} {{live}}", "--host-rate"),
    (f"crawl {SEED} --host-rate a.example=fast {{live}}", "--host-rate"),
    (f"crawl {SEED} --option max_depht=3 {{live}}", "did you mean 'max_depth'"),
    (f"crawl {SEED} --option 'headers={{{{bad' {{live}}", "bad JSON"),
    (f"crawl {SEED} --option max_retries=many {{live}}", "max_retries"),
    (f"crawl {SEED} --option obey_robots=maybe {{live}}", "obey_robots"),
    (f"crawl {SEED} --option include=5 {{live}}", "include"),
    (f"crawl {SEED} --option rate=0 {{live}}", "rate"),
    (f"crawl {SEED} --option crawl_id=mine {{live}}", "crawl_id"),
    (f"crawl {SEED} --option max_depth {{live}}", "KEY=VALUE"),
    (f"crawl {SEED} --output /proc/version/out {{live}}", "not a directory"),
    (f"crawl {SEED} --output /proc/sys/out {{live}}", "cannot write there"),
    (f"crawl {SEED} --allowed-domain http://127.0.0.1:8600/ {{live}}", "allowed domain"),
    (f"crawl {SEED} --option 'allowed_domains=[\"http://x/\"]' {{live}}", "allowed domain"),
    (f"crawl {SEED} --extract json:nope {{live}}", "json has no 'nope'"),
    (f"crawl {SEED} --extract json:__name__ {{live}}", "is not a function"),
    # set-rate
    ("set-rate a.example abc {live}", "abc"),
    ("set-rate a.example 0 {live}", "must be between 0.001"),
    ("set-rate http://127.0.0.1:8600/ 5 {live}", "here: 127.0.0.1"),
    ("set-rate a.example:8080 5 {live}", "not a URL or host:port"),
    ("set-rate 'a b' 5 {live}", "host name"),
    ("set-ceiling http://127.0.0.1:8600/ 5 {live}", "here: 127.0.0.1"),
    ("set-ceiling a.example inf {live}", "a ceiling is a number"),
    ("set-ceiling a.example 0 {live}", "must be between 0.001"),
    # schedules
    (f"schedule add s {SEED} --cron 'bogus cron' {{live}}", "cron"),
    (f"schedule add s {SEED} --cron '99 * * * *' {{live}}", "99"),
    (f"schedule add s {SEED} --cron '0 0 31 2 *' {{live}}", "'0 0 31 2 *' never fires"),
    (f"schedule add s {SEED} --every-hours -1 {{live}}", "every_hours"),
    (f"schedule add s {SEED} --every-hours 0 {{live}}", "every_hours must be between"),
    ("schedule add s http://127.0.0.1:9/ --every-hours 1 {live}", "--option allow_private"),
    (f"crawl {SEED} --concurrency 100000 {{live}}", "concurrency must be between 1 and 1,000"),
    # numbers past their ceiling, periods under their floor (issue 34)
    (f"crawl {SEED} --max-pages 99999999999999999999 {{live}}", "max_pages must be between"),
    (f"crawl {SEED} --max-depth 1000000000 {{live}}", "max_depth must be between"),
    (f"crawl {SEED} --default-rate 1e400 {{live}}", "rate must be a number up to its limit"),
    (f"crawl {SEED} --default-rate nan {{live}}", "not nan"),
    (f"crawl {SEED} --rate a.example=1e400 {{live}}", "too large"),
    (f"crawl {SEED} --option burst=5000 {{live}}", "burst must be between 0 and 1,000"),
    (f"crawl {SEED} --extract-timeout 1e400 {{live}}", "extract_timeout"),
    (f"crawl {SEED} --option max_body_bytes=1e12 {{live}}", "max_body_bytes"),
    ("set-rate 127.0.0.1 -5 {live}", "rate '-5': rate must be between 0.001"),
    ("set-rate a.example 1e400 {live}", "too large"),
    ("set-rate a.example nan {live}", "not nan"),
    ("set-ceiling a.example -5 {live}", "rate '-5'"),
    (
        f"schedule add flood {SEED} --every-seconds 0.001 {{live}}",
        "every_seconds must be between 60",
    ),
    (f"schedule add s {SEED} --every-hours 1e400 {{live}}", "every_hours"),
    ("forget nope {live}", "no crawl 'nope'"),
    (f"schedule add s {SEED} --every-hours 1 --option max_depht=3 {{live}}", "max_depth"),
    (f"schedule add s {SEED} --every-hours 1 --option rate=0 {{live}}", "rate"),
    (f"schedule add s {SEED} --every-hours 1 --every-seconds 5 {{live}}", "exactly one"),
    ("schedule remove nope {live}", "nope"),
    (f"schedule add s {SEED} --every-hours 1 --option partitions=-1 {{live}}", "partitions"),
    (f"schedule add s {SEED} --every-hours 1 --option partitions=5000 {{live}}", "1,024"),
    (f"schedule add s {SEED} --every-hours 1 --option 'include=[1' {{live}}", "bad JSON"),
    (f"schedule add s {SEED} --every-hours 1 --option max_retries=many {{live}}", "max_retries"),
    ("schedule add s http://127.0.0.1/ --every-hours 1 {live}", "allow-private"),
    # metrics
    ("metrics --port {busy} {live}", "{busy}"),
]


@pytest.fixture
def busy_port():  # type: ignore[no-untyped-def]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _keys(client: redis.Redis) -> set[bytes]:
    return {k for k in client.scan_iter(count=1000) if not k.startswith(b"_kombu")}


@pytest.mark.parametrize(("template", "names"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(template, names, redis_url, busy_port):
    client = redis.Redis.from_url(redis_url)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    args = shlex.split(
        template.format(
            live=f"--broker {redis_url}",
            dead=f"--broker {dead}",
            busy=busy_port,
            tls=f"--broker {redis_url.replace('redis://', 'rediss://')}",
        )
    )
    before = _keys(client)
    result = run(*args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (args, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert names.format(busy=busy_port) in lines[0], lines[0]
    assert _keys(client) == before


def test_no_wait_without_workers_refuses_and_writes_nothing(redis_url):
    client = redis.Redis.from_url(redis_url)
    result = run("crawl", SEED, "--no-wait", "--broker", redis_url)
    assert result.returncode == 2
    assert "no worker consumes the crawl queues" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(client.scan_iter("crawler:*"))


def test_no_wait_with_workers_returns_and_the_crawl_finishes(redis_url, celery_worker, tmp_path):
    wait_until(lambda: _has_crawl_workers(load(env={}, broker_url=redis_url)), timeout=60)
    with running_sites(["127.0.0.48"], 6, 2) as (_, servers):
        args = ("crawl", servers[0].base_url + "/", "--no-wait", "--broker", redis_url,
                "--allow-private-networks", "--output", str(tmp_path))  # fmt: skip
        result = run(*args, "--rate", "127.0.0.48=inf")
        assert result.returncode == 0, result.stderr
        crawl_id = result.stdout.strip()
        summary = Crawl(crawl_id, broker=redis_url).wait(timeout=60)
        # --json is honoured; the same seeds while a crawl of them runs: a warning.
        # 0.1 req/s: the crawl runs 20 s or more whatever part of the 6 pages the root
        # reaches (at 0.5 req/s it could end before a second command started on a loaded
        # machine: 8 s seen); both are cancelled below.
        first = run(*args, "--rate", "127.0.0.48=0.1", "--json")
        started = json.loads(first.stdout)
        assert started["status"] == "running" and "warning" not in first.stderr, first.stderr
        again = run(*args, "--json")
        assert f"warning: crawl {started['crawl_id']} of the same seeds is still running" in (
            again.stderr
        )
        for one in (started["crawl_id"], json.loads(again.stdout)["crawl_id"]):
            Crawl(one, broker=redis_url).cancel()
            assert Crawl(one, broker=redis_url).wait(timeout=90)["status"] == "cancelled"
    assert summary["status"] == "finished" and summary["counters"]["done"] >= 6


def test_finished_crawl_is_not_revived_and_its_events_end(redis_url, celery_worker, settings):
    with running_sites(["127.0.0.49"], 4, 2) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"],
            settings=settings,
            allow_private_networks=True,
            rates={"127.0.0.49": float("inf")},
        )
        crawl.wait(timeout=60)
    for action in ("pause", "resume", "cancel"):
        result = run(action, crawl.id, "--broker", redis_url)
        assert result.returncode == 2 and "finished" in result.stderr, result.stderr
    assert crawl.status == "finished"
    assert crawl.wait(timeout=5)["status"] == "finished"
    (final,) = list(crawl.events())  # at once: its crawl_finished, rebuilt from the summary
    assert final["event"] == "crawl_finished" and final["replayed"]
    assert final["summary"]["status"] == "finished" and final["summary"]["counters"]["done"] >= 4


def test_python_api_refuses_bad_options_and_unknown_ids(settings, client):
    for bad in ({"rate": 0}, {"concurrency": 0}, {"burst": -1}, {"max_depth": -1}):
        with pytest.raises(ConfigError):
            start_crawl([SEED], settings=settings, **bad)
    with pytest.raises(ConfigError, match="did you mean 'max_depth'"):
        start_crawl([SEED], settings=settings, max_depht=3)
    with pytest.raises(ConfigError, match="invalid allowed domain"):
        start_crawl([SEED], settings=settings, allowed_domains=["http://127.0.0.1:8600/"])
    with pytest.raises(UnknownCrawl):
        Crawl("nope", settings=settings).pause()
    assert not list(client.scan_iter("crawler:*"))
    # One URL as a string is that seed, not its characters.
    crawl = start_crawl(SEED, settings=settings)
    assert crawl.options.seeds == (SEED,)


@pytest.mark.parametrize(
    ("name", "value", "names"),
    [
        ("CRAWLER_KEY_PREFIX", "crawl{er}", "CRAWLER_KEY_PREFIX"),
        ("CRAWLER_PARTITIONS", "many", "CRAWLER_PARTITIONS"),
        ("CRAWLER_FETCH_BATCH", "0", "CRAWLER_FETCH_BATCH"),
        ("CRAWLER_FETCH_BATCH", "-2", "CRAWLER_FETCH_BATCH"),
        ("CRAWLER_WARC_GZIP_LEVEL", "10", "warc_gzip_level must be between 0 and 9"),
        ("CRAWLER_CA_BUNDLE", "/no/such/ca.pem", "CRAWLER_CA_BUNDLE='/no/such/ca.pem': no such"),
    ],
)
def test_bad_settings_are_one_line_exit_2(name, value, names, redis_url):  # type: ignore[no-untyped-def]
    result = cli_process.run("list", "--broker", redis_url, env={**os.environ, name: value})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "setting", "value", "words"),
    [
        (["worker", "-Q", "parse", "--pool", "solo"], "MAX_RETRIES", "three", "='three'"),
        (["beat"], "MAX_RETRIES", "three", "='three'"),
        (["worker", "-Q", "crawl.high"], "CA_BUNDLE", "/no/ca.pem", "='/no/ca.pem': no such file"),
    ],
)
def test_a_worker_or_beat_with_a_bad_setting_does_not_start(  # type: ignore[no-untyped-def]
    command, setting, value, words, redis_url, tmp_path
):
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, f"CRAWLER_{setting}": value}
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "crawler_tasks", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"CRAWLER_{setting}{words}" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"crawl_id": "a{b}"}, "crawl id"),
        ({"partitions": 0.5}, "partitions"),
        ({"partitons": 4}, "did you mean 'partitions'"),
    ],
)
def test_bad_crawl_ids_and_partitions_are_refused(settings, options, names):  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=names):
        start_crawl([SEED], settings=settings, **options)


SECRET = "Zq7-s3cr3t"


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:{{port}}/0",
        f"redis://user:{SECRET}@127.0.0.1:{{port}}/0",
        f"redis://:{SECRET[:4]}@{SECRET[4:]}@127.0.0.1:{{port}}/0",  # an unescaped "@"
        f"redis://:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1:{{port}}/0",  # an unescaped "/"
        f"redis://:{SECRET[:4]}:{SECRET[4:]}@127.0.0.1:{{port}}/0",
        f"unix:///tmp/no.sock?db=0&password={SECRET}",
    ],
)
def test_no_part_of_a_password_is_ever_printed(url):
    result = run("list", "--broker", url.format(port=free_port()))
    assert result.returncode == 2, result.stderr
    shown = result.stdout + result.stderr
    for i in range(len(SECRET) - 2):  # no three characters of it in a row
        assert SECRET[i : i + 3] not in shown, shown


def _malformed_crawl(client: redis.Redis, crawl_id: str) -> None:
    """What `--max-pages 99999999999999999999` left before its ceiling: running, a config no
    version can take (its Bloom shape had 2e13 shards), no frontier."""
    config = {"crawl_id": crawl_id, "seeds": [SEED], "max_pages": 10**20}
    client.zadd("crawler:crawls", {crawl_id: time.time()})
    client.set(f"crawler:{{{crawl_id}}}:config", json.dumps(config))
    client.hset(f"crawler:{{{crawl_id}}}:state", mapping={"status": "running"})
    client.sadd("crawler:running", crawl_id)


def test_a_malformed_crawl_breaks_no_command_and_forget_removes_it(redis_url, client):
    _malformed_crawl(client, "bad-1")
    tracemalloc.start()
    began = time.monotonic()
    listed = list_crawls(client, Keys("crawler"))
    took, (_, peak) = time.monotonic() - began, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert took < 1 and peak < 100 * 2**20, (took, peak)
    assert [c["unreadable"] for c in listed] == [
        "crawl bad-1 cannot be read (ConfigError: max_pages must be between 0 and "
        "1,000,000,000, not 100000000000000000000); `crawler forget bad-1` removes it"
    ]
    result = run("list", "--broker", redis_url)
    assert result.returncode == 0 and result.stderr.startswith("skipped: crawl bad-1"), result
    assert len(result.stderr.strip().splitlines()) == 1
    for command in ("status", "cancel", "failed"):
        result = run(command, "bad-1", "--broker", redis_url)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result
        assert "crawler forget bad-1" in result.stderr
    listed = json.loads(run("list", "--json", "--broker", redis_url).stdout)
    assert [c["unreadable"] for c in listed][0].startswith("crawl bad-1 cannot be read")
    result = run("forget", "bad-1", "--broker", redis_url)
    assert result.returncode == 0, result.stderr
    assert not [k for k in client.scan_iter("crawler:*") if b"bad-1" in k]
    assert not client.zscore("crawler:crawls", "bad-1")
    assert not client.sismember("crawler:running", "bad-1")


def test_forget_refuses_a_served_running_crawl_without_force(redis_url, client, settings):
    crawl = start_crawl([SEED], settings=settings)  # no worker fetches it: it stays running
    client.hset("crawler:workers", "w1", time.time())  # a live worker serves it
    result = run("forget", crawl.id, "--broker", redis_url)
    assert result.returncode == 2 and "--force" in result.stderr, result.stderr
    assert crawl.exists()
    assert crawl.forget(force=True) > 0
    assert not crawl.exists()
    assert crawl.id not in [c["crawl_id"] for c in list_crawls(client, Keys("crawler"))]


def test_cancel_with_no_worker_says_when_it_will_happen(redis_url, client, settings):
    crawl = start_crawl([SEED], settings=settings)
    client.hset("crawler:workers", "w1", time.time())  # a live worker: nothing to add
    result = run("pause", crawl.id, "--broker", redis_url)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    client.delete("crawler:workers")  # stranded
    result = run("cancel", crawl.id, "--broker", redis_url)
    assert result.returncode == 0, result.stderr
    assert "no worker serves this crawl: it will be cancelled when one starts" in result.stderr
