"""The deploy files run as written: the systemd dashboard unit's command serves, and
config/respawn.sh gives up on a command that cannot start. The files' agreement with each
other: tests/unit/test_deploy_files.py."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.support.paths import ROOT


def test_respawn_gives_up_on_a_command_that_cannot_start(tmp_path):
    """`honcho start` without the venv on PATH: one clear line and an exit, not a loop."""
    import subprocess

    script = str(ROOT / "config" / "respawn.sh")
    env = {"PATH": "/usr/bin:/bin", "RESPAWN_DELAY": "0.05"}
    missing = subprocess.run(
        ["sh", script, "celery-not-on-path", "-A", "crawler_tasks", "worker"],
        capture_output=True, text=True, timeout=30, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert missing.returncode == 127
    assert "venv on PATH" in missing.stderr.strip().splitlines()[-1]
    failing = subprocess.run(
        ["sh", script, "sh", "-c", "exit 3"],
        capture_output=True, text=True, timeout=30, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert failing.returncode == 1
    lines = failing.stderr.strip().splitlines()
    assert len(lines) == 5 and "giving up" in lines[-1] and "last status 3" in lines[-1]


def test_systemd_dashboard_unit_runs_as_written(redis_url, tmp_path):
    """The unit's ExecStart, its venv path made this one's and its port a free one (the suite
    runs in parallel): the dashboard comes up on loopback and answers with the unit's auth."""
    import os
    import subprocess
    import sys

    import requests

    from crawler_tasks.surface.embedded import free_port, stop_process
    from tests.support.waiting import wait_until

    text = (ROOT / "config" / "systemd" / "crawler-dashboard.service").read_text()
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    port = free_port()
    words = shlex.split(exec_start.removeprefix("ExecStart="))
    words[0] = str(Path(sys.executable).parent / Path(words[0]).name)
    words[words.index("--port") + 1] = str(port)
    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_DASHBOARD_AUTH": "ops:pw"}
    proc = subprocess.Popen(words, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api/crawls"

    def answer(auth: tuple[str, str] | None) -> int | None:
        try:
            return requests.get(url, auth=auth, timeout=2).status_code
        except requests.ConnectionError:
            return None

    try:
        assert wait_until(lambda: answer(None), timeout=20) == 401
        assert answer(("ops", "pw")) == 200
    finally:
        stop_process(proc)
