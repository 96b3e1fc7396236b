"""A render worker SIGKILLed mid-page (its browser with it) loses nothing, and the host's rate
holds across both render processes, subrequests included (the site logs every request's time).
The render tier's processes otherwise: tests/integration/test_render_workers.py."""

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

pytestmark = pytest.mark.timeout(180)

N = 30


RATE = 8.0


def _start_render(c, name: str) -> None:  # type: ignore[no-untyped-def]
    c.specs[name] = ("crawl.render", "threads", 2, {})
    c._spawn(name)


def _rendering_in(crawl, proc: subprocess.Popen[bytes]) -> bool:  # type: ignore[no-untyped-def]
    mark = f"|w:{socket.gethostname()}-{proc.pid}".encode()
    return any(v.endswith(mark) for pk in crawl.ck.parts for v in crawl.client.hvals(pk.inflight))


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
