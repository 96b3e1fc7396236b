"""The render tier with real Celery processes: a threads-pool fetch worker and two render
workers (``-Q crawl.render``, a browser each), as the README runs them. A render worker
SIGKILLed mid-page (its browser with it) loses nothing, and the host's rate holds across both
render processes, subrequests included (the site logs every request's time)."""

from __future__ import annotations

import socket
import subprocess
from collections import Counter

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.web.urls import normalize
from tests.faults.test_faults import cluster
from tests.support import jssite
from tests.support.sitegen import PACE_WINDOW, SiteServer, rate_report
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
N = 30
RATE = 8.0


def _start_render(c, name: str) -> None:  # type: ignore[no-untyped-def]
    c.specs[name] = ("crawl.render", "threads", 2, {})
    c._spawn(name)


def _rendering_in(crawl, proc: subprocess.Popen[bytes]) -> bool:  # type: ignore[no-untyped-def]
    mark = f"|w:{socket.gethostname()}-{proc.pid}".encode()
    return any(v.endswith(mark) for pk in crawl.ck.parts for v in crawl.client.hvals(pk.inflight))


@pytest.mark.fault
@pytest.mark.allow_worker_errors(".*")
def test_render_worker_killed_loses_nothing_and_the_rate_holds(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    routes = jssite.routes(N, js=True, api_delay=0.3)
    with (
        SiteServer(address="127.0.0.88", extra_routes=routes) as site,
        cluster(redis_url, tmp_path, CRAWLER_RENDER_SETTLE="1") as c,
    ):
        c.start("fetch", "fetch")
        _start_render(c, "render1")
        _start_render(c, "render2")
        crawl = start_crawl(
            [site.base_url + "/"],
            settings=settings,
            allow_private_networks=True,
            allowed_domains=[site.address],
            render="always",
            rate=RATE,
            burst=1,
            concurrency=1,  # more in flight per host drifts apart (politeness.py)
        )
        # Killed while it renders a page (stage "w" held by it): its browser dies with it.
        wait_until(lambda: _rendering_in(crawl, c.procs["render1"]), timeout=60, interval=0.02)
        c.kill("render1", restart=False)
        summary = crawl.wait(timeout=120)
    got = Counter(r["url"] for r in crawl.pages(latest=False))
    assert set(got) == {normalize(u) for u in jssite.all_urls(site.base_url, N)}
    assert max(got.values()) == 1
    counters = summary["counters"]
    assert counters["done"] == counters["rendered"] == N and counters.get("failed", 0) == 0
    report = rate_report(site.requests(), window=PACE_WINDOW)
    print(report)
    assert report["max_in_window"] <= RATE + 1, report
    assert report["count"] >= N + 2 * (N // 3)  # pages, scripts and XHRs all in the log


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
