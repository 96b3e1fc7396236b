"""The `crawler` command as a user runs it: a subprocess, real Redis, real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sitegen import running_sites

from crawler_tasks.surface.embedded import free_port


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
def test_unreachable_broker_falls_back_to_embedded(tmp_path, scheme):
    dead = f"{scheme}://:s3cret@127.0.0.1:{free_port()}/0"
    with running_sites(["127.0.0.17"], 8, 2) as (_, servers):
        result = run(
            "crawl",
            servers[0].base_url + "/",
            "--broker",
            dead,
            "--allow-private-networks",
            "--output",
            str(tmp_path),
            "--json",
            "--rate",
            "127.0.0.17=inf",
        )
    assert result.returncode == 0, result.stderr
    assert "unreachable: running embedded" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout  # the password is masked
    assert f"broker {scheme}://:***@127.0.0.1:" in result.stderr
    assert json.loads(result.stdout)["status"] == "finished"
