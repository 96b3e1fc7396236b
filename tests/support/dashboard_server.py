"""``crawler dashboard`` as a real process for the tests (tests/integration/test_dashboard*.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import requests

from crawler_tasks.surface.embedded import free_port, stop_process
from tests.support.waiting import wait_until

#: user:password the tests' dashboards require.
AUTH = ("operator", "s3cret-pass")


@contextlib.contextmanager
def dashboard(
    broker: str, auth: tuple[str, str] | None = AUTH, args: list[str] | None = None
) -> Iterator[str]:
    """A dashboard process on a free loopback port; yields its base URL."""
    port = free_port()
    env = {**os.environ, "CRAWLER_BROKER_URL": broker}
    if auth:
        env["CRAWLER_DASHBOARD_AUTH"] = ":".join(auth)
    cmd = [sys.executable, "-m", "crawler_tasks.surface.cli", "dashboard"]
    cmd += args if args is not None else ["--address", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base) or proc.poll() is not None, timeout=20)
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        yield base
    finally:
        stop_process(proc)


def _answers(base: str) -> bool:
    try:
        requests.get(base + "/api/crawls", timeout=1)
        return True
    except requests.ConnectionError:
        return False


def session(base: str, auth: tuple[str, str] | None = AUTH) -> requests.Session:
    """A client that has loaded a page (so it holds the XSRF cookie) and sends it back."""
    s = requests.Session()
    s.auth = auth
    s.get(base + "/", timeout=5).raise_for_status()
    s.headers["X-XSRFToken"] = s.cookies["_xsrf"]
    return s
