"""Processes started by `crawler crawl --embedded` (a private redis-server, fetch and parse
workers and their pool processes) never outlive the command: neither after a normal finish nor
after the command is killed with SIGKILL, when no cleanup code of it runs."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys

from tests.support.embedded_command import (
    alive,
    crawl_started,
    embedded_crawl,
    marked,
    redis_children,
)
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


def test_nothing_survives_a_normal_finish(tmp_path):
    mark = secrets.token_hex(8)
    with running_sites(["127.0.0.50"], 15, 3) as (_, servers):
        proc = embedded_crawl(servers[0].base_url + "/", "127.0.0.50", "inf", tmp_path, mark)
        redis_pids = wait_until(lambda: redis_children(proc.pid), timeout=30)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "finished" in out
    wait_until(lambda: not marked(mark), timeout=20)
    assert not any(alive(p) for p in redis_pids)


def test_sigterm_cleans_up_the_commands_temp_dir_and_processes(tmp_path):
    mark = secrets.token_hex(8)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with running_sites(["127.0.0.53"], 200, 3) as (_, servers):
        url = servers[0].base_url + "/"
        argv = [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", url, "--embedded"]
        argv += ["--allow-private-networks", "--rate", "127.0.0.53=5", "--output", str(tmp_path)]
        env = {**os.environ, "CRAWL_TEST_MARK": mark, "TMPDIR": str(tmp)}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: list(tmp.glob("crawler-logs-*")), timeout=60)
            wait_until(lambda: "started" in crawl_started(tmp_path), timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not list(tmp.glob("crawler-logs-*"))
    wait_until(lambda: not marked(mark), timeout=30)
