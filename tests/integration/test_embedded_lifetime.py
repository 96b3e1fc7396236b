"""Processes started by `crawler crawl --embedded` (a private redis-server, fetch and parse
workers and their pool processes) never outlive the command: neither after a normal finish nor
after the command is killed with SIGKILL, when no cleanup code of it runs."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


def _marked(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``mark`` (inherited by every child)."""
    needle = f"CRAWL_TEST_MARK={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                stat = (entry / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":  # zombies are gone already
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _redis_of(pid: int) -> list[int]:
    """redis-server children of ``pid`` (redis rewrites its environment: no mark there)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(") ", 1)
        if name.startswith("redis-server") and int(rest.split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _command(url: str, host: str, rate: str, out: Path, mark: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", url, "--embedded"]
    argv += ["--allow-private-networks", "--rate", f"{host}={rate}", "--output", str(out)]
    env = {**os.environ, "CRAWL_TEST_MARK": mark}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_nothing_survives_a_normal_finish(tmp_path):
    mark = secrets.token_hex(8)
    with running_sites(["127.0.0.50"], 15, 3) as (_, servers):
        proc = _command(servers[0].base_url + "/", "127.0.0.50", "inf", tmp_path, mark)
        redis_pids = wait_until(lambda: _redis_of(proc.pid), timeout=30)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "finished" in out
    wait_until(lambda: not _marked(mark), timeout=20)
    assert not any(_alive(p) for p in redis_pids)


@pytest.mark.fault
def test_nothing_survives_a_sigkill_of_the_command(tmp_path):
    mark = secrets.token_hex(8)
    with running_sites(["127.0.0.51"], 200, 3) as (_, servers):
        proc = _command(servers[0].base_url + "/", "127.0.0.51", "5", tmp_path, mark)
        try:
            # The command, two fetch workers, the parse worker and its pool process.
            wait_until(lambda: len(_marked(mark)) >= 5, timeout=60)
            redis_pids = wait_until(lambda: _redis_of(proc.pid), timeout=30)
            wait_until(lambda: "started" in _peek(tmp_path), timeout=60)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        wait_until(lambda: not _marked(mark), timeout=30)
        assert not any(_alive(p) for p in redis_pids)


def _peek(out: Path) -> str:
    """'started' once a crawl directory with a pages file exists (the crawl is under way)."""
    return "started" if list(out.glob("*/pages-*.jsonl")) else ""


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
            wait_until(lambda: "started" in _peek(tmp_path), timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not list(tmp.glob("crawler-logs-*"))
    wait_until(lambda: not _marked(mark), timeout=30)
