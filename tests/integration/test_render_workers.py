"""The render tier's processes: a render worker without its browser, a browser that cannot
start, and ``crawler crawl --embedded --render`` run as users run it (a subprocess starting its
own Redis, fetch, parse and render workers, and the system Chromium)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.sitegen import SiteServer

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.mark.parametrize(
    ("path", "says"),
    [("/nonexistent/chromium-browser", "no such file"), ("/bin/false", "exits 1")],
)
def test_a_render_worker_without_its_browser_refuses_to_start(redis_url, path, says):  # type: ignore[no-untyped-def]
    """A wrong CRAWLER_CHROMIUM_PATH: one line and exit 2, not "ready" and every page an
    internal_error."""
    from crawler_tasks.surface.embedded import worker_command
    from crawler_tasks.worker.process.app import RENDER_QUEUE

    env = {**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_CHROMIUM_PATH": path}
    done = subprocess.run(
        worker_command(RENDER_QUEUE, "threads", 1, f"render-check-{os.getpid()}"),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"CRAWLER_CHROMIUM_PATH={path}: {says}" in lines[0], lines


def test_a_browser_that_cannot_start_names_its_cause() -> None:
    """Not a bare internal_error: render_failed, with Playwright's first line as the cause."""
    from crawler_tasks.errors import RenderFailed
    from crawler_tasks.settings import load
    from crawler_tasks.worker.render.browser import BrowserPool, RenderJob

    pool = BrowserPool(load(env={}, chromium_path="/nonexistent/chromium-browser"))
    job = RenderJob("http://127.0.0.1:9/", 200, {}, b"<html></html>", lambda *a: None, 10, 1)  # type: ignore[arg-type, return-value]
    try:
        with pytest.raises(RenderFailed, match="cannot start: .*executable doesn.t exist at"):
            pool.render(job)
    finally:
        pool.close()


#: A site of one HTML page, for a crawl that renders.
ONE_PAGE = {"/": lambda h: h.send_body(200, b"<html><body><p>one page</p></body></html>")}


def _crawl(site: SiteServer, out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 150) -> tuple[subprocess.CompletedProcess[str], float, str]:  # fmt: skip
    """``crawler crawl`` of ``site`` rendered, embedded (its own Redis and workers); the
    processes it starts carry a mark in their environment (:func:`_left_running`)."""
    mark = f"render50-{os.getpid()}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", site.base_url + "/"]
    cmd += ["--allow-private-networks", "--embedded", "--render", "always"]
    cmd += ["--output", str(out), *args]
    env = {**os.environ, "TESTS_PROCESS_MARK": mark, **(env or {})}
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return done, time.monotonic() - began, mark


def _left_running(mark: str) -> list[str]:
    """Processes whose environment holds ``mark`` (the command's Redis, workers, browsers)."""
    left = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"TESTS_PROCESS_MARK={mark}".encode() in environ.read_bytes().split(b"\0"):
                left.append((environ.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return left


def test_a_wrong_browser_path_stops_the_crawl_command_at_once(tmp_path):  # type: ignore[no-untyped-def]
    """Issue 50: with CRAWLER_CHROMIUM_PATH wrong, the embedded render worker refused to start
    and the crawl showed in_flight=1 for 4 minutes. Now: one line naming the path, exit 2,
    within 30 s (a loaded machine's start included), nothing written, nothing left running."""
    with SiteServer(address="127.0.0.155", extra_routes=ONE_PAGE) as site:
        done, took, mark = _crawl(
            site, tmp_path / "out", "--max-pages", "2",
            env={"CRAWLER_CHROMIUM_PATH": "/nonexistent/chromium"}, timeout=60,
        )  # fmt: skip
        requests = site.requests()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert "CRAWLER_CHROMIUM_PATH=/nonexistent/chromium: no such file" in lines[0], lines
    assert took < 30, took
    assert not (tmp_path / "out").exists() and requests == []
    assert _left_running(mark) == []


def test_a_crawl_whose_every_render_failed_exits_1(tmp_path):  # type: ignore[no-untyped-def]
    """Issue 50: a crawl whose one URL failed its render (fetched, then render_failed) exited
    0, "1 failed", where one whose fetches failed exits 1: every way a URL can fail counts the
    same."""
    with SiteServer(address="127.0.0.156", extra_routes=ONE_PAGE) as site:
        done, _took, mark = _crawl(site, tmp_path / "out", "--option", "render_deadline=0.1")
    assert done.returncode == 1, (done.stdout, done.stderr)
    line = next(x for x in done.stdout.splitlines() if "every URL failed" in x)
    assert "render_failed: render deadline (0.1s) exceeded" in line, done.stdout
    assert _left_running(mark) == []
