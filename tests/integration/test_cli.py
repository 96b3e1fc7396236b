"""The `crawler` command as a user runs it: a subprocess, real Redis, real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crawler_tasks.state.summary import Summary
from crawler_tasks.surface.embedded import free_port
from crawler_tasks.surface.summary import summary_text
from tests.support.paths import HOOKS
from tests.support.sitegen import running_sites
from tests.support.tls_site import https_site, make_ca

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_malformed_seed_is_rejected_by_name(redis_url):
    result = run("crawl", "http://ok.example/", "htp:/broken", "--broker", redis_url)
    assert result.returncode == 2
    assert "htp:/broken" in result.stderr


def test_loopback_seed_needs_the_explicit_flag(redis_url):
    result = run("crawl", "http://127.0.0.1:9/", "--broker", redis_url)
    assert result.returncode == 2 and "allow-private-networks" in result.stderr


def test_crawl_starts_local_workers_when_none_consume_the_queues(redis_url, tmp_path):
    with running_sites(["127.0.0.16"], 12, 3) as (_, servers):
        result = run(
            "crawl",
            servers[0].base_url + "/",
            "--broker",
            redis_url,
            "--allow-private-networks",
            "--rate",
            "127.0.0.16=inf",
            "--output",
            str(tmp_path),
            "--json",
        )
    assert result.returncode == 0, result.stderr
    assert "starting local workers" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished" and summary["counters"]["done"] >= 12
    assert (tmp_path / summary["crawl_id"] / "summary.json").exists()


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_an_explicit_broker_that_does_not_answer_is_never_replaced(tmp_path, scheme):
    dead = f"{scheme}://:s3cret@127.0.0.1:{free_port()}/0"
    result = run("crawl", "http://127.0.0.1:9/", "--broker", dead, "--allow-private-networks")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: broker {scheme}://:***@127.0.0.1:") and "refused" in line
    assert "s3cret" not in result.stderr + result.stdout  # the password is masked
    assert "embedded" not in result.stderr


def test_only_the_default_broker_falls_back_to_embedded(tmp_path):
    """Nothing named a broker: the built-in default that does not answer gives way to a
    private Redis and local workers (the CLI cannot be pointed at a dead default here without
    touching the machine's own Redis on 6379: its fallback is driven directly)."""
    from crawler_tasks.settings import load
    from crawler_tasks.surface.crawl_command import cluster

    dead = load(env={}, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with cluster(dead, False, str(tmp_path), explicit=False) as live:
        assert live.broker_url != dead.broker_url
        import redis

        assert redis.Redis.from_url(live.broker_url).ping()


def _serve_raw(reply: bytes):  # type: ignore[no-untyped-def]
    """A TCP server on loopback that answers anything with ``reply`` and closes."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(reply)

    threading.Thread(target=loop, daemon=True).start()
    return srv


@pytest.mark.parametrize(
    ("broker", "says"),
    [
        ("redis://127.0.0.1:{http}/0", "it answered, but it is not Redis"),
        ("redis://127.0.0.1:{locked}/0", "authentication failed"),
        ("redis://:Pw9zq@127.0.0.1:{locked}/0", "authentication failed"),
    ],
)
def test_broker_mistakes_are_one_line_naming_what_failed(broker, says, tmp_path):
    import shutil

    http = _serve_raw(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    port = free_port()
    locked = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", "",
         "--requirepass", "right", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = broker.format(http=http.getsockname()[1], locked=port)
        import time

        time.sleep(0.3)
        for args in (["crawl", "http://a.example/"], ["list"]):
            result = run(*args, "--broker", url)
            assert result.returncode == 2, result.stderr
            (line,) = result.stderr.strip().splitlines()
            assert says in line and "Pw9zq" not in line, line
            assert "HTTP/1.1 400" in line or "{http}" not in broker
    finally:
        http.close()
        locked.terminate()
        locked.wait(10)


def test_rabbitmq_mistakes_are_one_line(redis_url):
    if shutil_which("rabbitmqctl") is None:
        pytest.skip("no RabbitMQ on this machine")
    cases = [
        ("amqp://guest:wrong@127.0.0.1:5672//", "access refused: wrong user or password"),
        ("amqp://guest:guest@127.0.0.1:5672/no-such-vhost-crawler", "vhost"),
    ]
    for broker, says in cases:
        env = {"CRAWLER_BROKER_URL": broker, "CRAWLER_REDIS_URL": redis_url}
        result = run("crawl", "http://a.example/", env=env)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert says in line and "guest:***@" in line, line


def shutil_which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def test_the_summary_says_where_the_files_are_the_pace_and_the_first_extract_error(
    redis_url, tmp_path
):
    hooks = str(HOOKS)
    env = {"PYTHONPATH": os.pathsep.join([hooks, os.environ.get("PYTHONPATH", "")])}
    with running_sites(["127.0.0.18"], 3, 2) as (_, servers):
        result = run(
            "crawl", servers[0].base_url + "/", "--broker", redis_url, "--allow-private-networks",
            "--output", str(tmp_path), "--extract", "extract_hooks:moody_everywhere", env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "pace: 1 request/s per host (politeness" in result.stderr
    crawl_id = result.stdout.split()[1]
    assert f"  files: {tmp_path / crawl_id}" in result.stdout
    assert "  first extract error: http://127.0.0.18:" in result.stdout
    assert "ValueError: no price on this page" in result.stdout


def test_seeds_file_every_seed_crawled_checked_first_and_stdin(redis_url, tmp_path):
    """More seeds than the crawl's options keep (seeds.KEPT): the rest stream in batches."""
    from crawler_tasks.surface.seeds import KEPT

    with running_sites(["127.0.0.19", "127.0.0.20"], 70, 2) as (graph, servers):
        urls = sorted(graph.pages)
        assert len(urls) > KEPT
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("# my seeds\n\n" + "\n".join(urls) + "\n")
        common = ["--broker", redis_url, "--allow-private-networks", "--max-depth", "0"]
        common += ["--rate", "127.0.0.19=inf", "--rate", "127.0.0.20=inf", "--json"]
        result = run("crawl", "--seeds-file", str(seeds), *common, "--output", str(tmp_path))
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["counters"]["admitted"] == len(urls)
        assert summary["counters"]["done"] == len(urls)
        # Standard input (a few seeds: the batches were shown above).
        piped = subprocess.run(
            [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", "--seeds-file", "-",
             *common, "--output", str(tmp_path / "again")],
            input="\n".join(urls[:5]), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert piped.returncode == 0, piped.stderr
        assert json.loads(piped.stdout)["counters"]["done"] == 5


def test_a_bad_line_in_a_seeds_file_is_named_before_anything_is_written(redis_url, tmp_path):
    import redis

    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\nhttp://b.example/\nhtp:/broken\n")
    before = set(redis.Redis.from_url(redis_url).scan_iter())
    result = run("crawl", "--seeds-file", str(seeds), "--broker", redis_url)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "htp:/broken" in line and "line 3 of" in line
    assert set(redis.Redis.from_url(redis_url).scan_iter()) == before
    result = run("crawl", "--broker", redis_url)
    assert result.returncode == 2 and "--seeds-file" in result.stderr


def test_a_hook_no_worker_can_import_fails_the_crawl_once(redis_url, tmp_path):
    with running_sites(["127.0.0.21"], 30, 3) as (_, servers):
        result = run(
            "crawl", servers[0].base_url + "/", "--broker", redis_url, "--allow-private-networks",
            "--rate", "127.0.0.21=2", "--output", str(tmp_path),
            "--extract", "no_such_module_anywhere:fn",
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "error: cannot import the hook no_such_module_anywhere:fn: ModuleNotFoundError" in (
        result.stdout
    )
    assert " cancelled in " in result.stdout.splitlines()[0]
    crawl_id = result.stdout.split()[1]
    shown = run("status", crawl_id, "--json", "--broker", redis_url)
    progress = json.loads(shown.stdout)
    assert progress["error"].startswith("cannot import the hook no_such_module_anywhere:fn")
    assert progress["extract_errors"] <= 2  # not one per page: the crawl stopped at once


def test_an_https_seed_on_a_plain_http_server_names_the_tls_failure(redis_url, tmp_path):
    with running_sites(["127.0.0.22"], 3, 2) as (_, servers):
        seed = servers[0].base_url.replace("http://", "https://") + "/"
        result = run(
            "crawl", seed, "--broker", redis_url, "--allow-private-networks",
            "--output", str(tmp_path),
        )  # fmt: skip
    # Nothing could be fetched: not a success, and not "robots.txt unreachable, 0 failed".
    assert result.returncode == 1, result.stderr
    summary = result.stdout
    assert "1 failed" in summary and "robots.txt unreachable" not in summary, summary
    assert "failures: {'tls_error': 1}" in summary, summary
    assert "TLS failed: https://127.0.0.22:" in summary and ": tls_error: " in summary, summary


def test_a_private_ca_fails_by_name_until_it_is_given(redis_url, tmp_path):
    files = make_ca(tmp_path, "127.0.0.24")
    out = tmp_path / "out"
    with https_site("127.0.0.24", files) as site:
        seed = f"https://127.0.0.24:{site.server_port}/"
        args = ("crawl", seed, "--broker", redis_url, "--allow-private-networks",
                "--rate", "127.0.0.24=inf", "--output", str(out), "--json")  # fmt: skip
        refused = run(*args)
        assert site.paths == [] and site.handshakes_failed >= 1  # no request ever sent
        trusted = run(*args, env={"CRAWLER_CA_BUNDLE": str(files["ca"])})
    why = "tls_error: certificate verify failed: unable to get local issuer certificate"
    assert refused.returncode == 1, refused.stderr
    summary = json.loads(refused.stdout)
    assert summary["failures"] == {"tls_error": 1}, summary
    assert summary["counters"]["failed"] == 1 and not summary["counters"].get("fetched")
    assert not summary["counters"].get("robots_unreachable")
    assert summary["tls_error_why"] == f"https://127.0.0.24:{site.server_port}: {why}"
    assert f"TLS failed: https://127.0.0.24:{site.server_port}: {why}" in summary_text(
        Summary.from_json(summary)
    )
    (record,) = [json.loads(line) for f in (out / summary["crawl_id"]).glob("pages*.jsonl")
                 for line in f.read_text().splitlines()]  # fmt: skip
    assert record["error"] == "tls_error" and record["detail"] == f"robots.txt: {why}"
    shown = run("status", summary["crawl_id"], "--broker", redis_url)
    assert shown.returncode == 0 and "failed=1 " in shown.stdout and why in shown.stdout
    # Given the CA's file, the same crawl succeeds: robots.txt and the three pages.
    assert trusted.returncode == 0, trusted.stderr
    ok = json.loads(trusted.stdout)
    assert ok["counters"]["fetched"] == 3 and not ok.get("failures"), ok
    assert sorted(site.paths) == ["/", "/a.html", "/b.html", "/robots.txt"]


def test_a_bad_ca_bundle_stops_the_crawl_command_before_anything_is_written(redis_url, tmp_path):
    (tmp_path / "not.pem").write_text("not a certificate\n")
    for bundle, words in ((tmp_path / "none.pem", "no such file"),
                          (tmp_path / "not.pem", "not a PEM file of CAs")):  # fmt: skip
        result = run(
            "crawl", "https://127.0.0.24:9/", "--broker", redis_url, "--allow-private-networks",
            "--output", str(tmp_path / "out"), env={"CRAWLER_CA_BUNDLE": str(bundle)},
        )  # fmt: skip
        (line,) = result.stderr.strip().splitlines()
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert line.startswith(f"error: CRAWLER_CA_BUNDLE='{bundle}': {words}"), line
    assert not (tmp_path / "out").exists()


def test_a_mistyped_port_fails_the_crawl_in_one_short_line(redis_url, tmp_path):
    port = free_port()
    result = run(
        "crawl", f"http://127.0.0.1:{port}/", "--broker", redis_url, "--allow-private-networks",
        "--output", str(tmp_path), "--option", "max_retries=0", "--option", "max_host_outage=1",
    )  # fmt: skip
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = next(x for x in result.stdout.splitlines() if "nothing fetched" in x)
    assert f"connection refused at 127.0.0.1:{port}" in line, result.stdout
    assert "Pool" not in result.stdout and "Errno" not in result.stdout, result.stdout


def test_a_ca_given_to_the_command_but_not_the_workers_is_named(redis_url, celery_worker, tmp_path):  # type: ignore[no-untyped-def]
    from crawler_tasks.settings import load
    from crawler_tasks.surface.crawl_command import _has_crawl_workers
    from tests.support.waiting import wait_until

    wait_until(lambda: _has_crawl_workers(load(env={}, broker_url=redis_url)), timeout=60)
    files = make_ca(tmp_path, "127.0.0.25")
    with https_site("127.0.0.25", files) as site:
        result = run(
            "crawl", f"https://127.0.0.25:{site.server_port}/", "--broker", redis_url,
            "--allow-private-networks", "--output", str(tmp_path / "out"),
            env={"CRAWLER_CA_BUNDLE": str(files["ca"])},
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"this command has CRAWLER_CA_BUNDLE={files['ca']}, the workers" in result.stdout
