"""The render tier with real Celery processes: a threads-pool fetch worker and two render
workers (``-Q crawl.render``, a browser each), as the README runs them. A render worker
SIGKILLed mid-page (its browser with it) loses nothing, and the host's rate holds across both
render processes, subrequests included (the site logs every request's time)."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.mark.parametrize(
    ("path", "says"),
    [("/nonexistent/chromium-browser", "no such file"), ("/bin/false", "exits 1")],
)
def test_a_render_worker_without_its_browser_refuses_to_start(redis_url, path, says):  # type: ignore[no-untyped-def]
    """A wrong CRAWLER_CHROMIUM_PATH: one line and exit 2, not "ready" and every page an
    internal_error."""
    import os

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
