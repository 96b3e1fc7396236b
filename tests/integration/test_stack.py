"""The Procfile as an operator runs it: `honcho start` brings the stack up on free ports, keeps
it up (a crashed worker is started again instead of honcho stopping everything), serves
crawls, Flower answers only with basic auth, and the crawl dashboard lists the crawl."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from crawler_tasks.surface.embedded import free_port
from tests.support.paths import ROOT
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

SCHEDULE = """
[[schedule]]
name = "procfile-beat"
seeds = ["https://docs.example.org/"]
every_hours = 24
"""
pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")


def _marked(mark: str, needle: str = "") -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and mark.encode() in (entry / "environ").read_bytes()
                and needle.encode() in (entry / "cmdline").read_bytes()
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.fixture
def stack(tmp_path):  # type: ignore[no-untyped-def]
    shutil.copy(ROOT / "Procfile", tmp_path / "Procfile")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    # Beat as the Procfile starts it (no CRAWLER_SCHEDULES_FILE) loads config/schedules.toml.
    with open(tmp_path / "config" / "schedules.toml", "a") as f:
        f.write(SCHEDULE)
    mark = f"CRAWL_TEST_MARK={secrets.token_hex(8)}"
    ports = {
        "REDIS_PORT": str(free_port()),
        "FLOWER_PORT": str(free_port()),
        "DASHBOARD_PORT": str(free_port()),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAWLER_", "FLOWER_"))}
    env.update(ports, FLOWER_BASIC_AUTH="admin:pw-for-test", CRAWL_TEST_MARK=mark.split("=")[1])
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    honcho = subprocess.Popen(
        [str(Path(sys.executable).parent / "honcho"), "start"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield honcho, ports, mark
    finally:
        honcho.send_signal(signal.SIGTERM)
        try:
            honcho.wait(30)
        except subprocess.TimeoutExpired:
            honcho.kill()
        for pid in _marked(mark):  # anything honcho failed to stop fails the test below
            os.kill(pid, signal.SIGKILL)


def test_honcho_start_comes_up_stays_up_and_serves_crawls(stack, tmp_path):
    honcho, ports, mark = stack
    flower = f"http://127.0.0.1:{ports['FLOWER_PORT']}/api/workers"
    wait_until(lambda: _status(flower, None) == 401, timeout=60)
    assert _status(flower, ("admin", "pw-for-test")) == 200
    assert _status(flower, ("admin", "wrong")) == 401
    broker = f"redis://127.0.0.1:{ports['REDIS_PORT']}/0"
    # A crashed parse worker is started again; honcho and the rest stay up.
    (parse,) = wait_until(lambda: _marked(mark, "-Q\x00parse"), timeout=60)[:1]
    os.kill(parse, signal.SIGKILL)
    wait_until(lambda: [p for p in _marked(mark, "-Q\x00parse") if p != parse], timeout=60)
    time.sleep(3)
    assert honcho.poll() is None
    with running_sites(["127.0.0.52"], 8, 2) as (_, servers):
        result = subprocess.run(
            [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl"]
            + [servers[0].base_url + "/", "--broker", broker, "--allow-private-networks"]
            + ["--rate", "127.0.0.52=inf", "--output", str(tmp_path / "out"), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert "starting local workers" not in result.stderr  # the stack's workers did it
    assert '"status": "finished"' in result.stdout
    # The crawl dashboard as the Procfile runs it: loopback, no auth set, the crawl listed.
    crawl_id = json.loads(result.stdout)["crawl_id"]
    dashboard = f"http://127.0.0.1:{ports['DASHBOARD_PORT']}/api/crawls"
    listed_ids = wait_until(
        lambda: (
            _status(dashboard, None) == 200
            and [c["crawl_id"] for c in requests.get(dashboard, timeout=5).json()["crawls"]]
        ),
        timeout=60,
    )
    assert crawl_id in listed_ids
    listed = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "schedule", "list", "--broker", broker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.stdout.startswith("procfile-beat\tevery 24h\t"), listed.stdout + listed.stderr
    assert honcho.poll() is None


def _status(url: str, auth: tuple[str, str] | None) -> int | None:
    try:
        return requests.get(url, auth=auth, timeout=5).status_code
    except requests.RequestException:
        return None
