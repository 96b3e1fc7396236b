"""Adaptive schedules (issue 35): a run fetches only the pages that are due, their intervals
learnt from the changes their visits found, plus pages not seen before; a page not due keeps
its links (the run still reaches what it leads to) and is not counted gone. Runs at simulated
times (the run's time is what due-ness is measured against), through the real workers."""

from __future__ import annotations

import pytest

from crawler_tasks.state.keys import Keys
from crawler_tasks.state.validators import Validators
from tests.support.recrawl_site import (
    HOUR,
    T0,
    Server,
    SimSite,
    change_site,
    half_with_etags,
    run_at,
)
from tests.support.sitegen import running_sites


def fetched(server) -> set[str]:  # type: ignore[no-untyped-def]
    got = {server.base_url + r.path for r in server.requests() if r.path != "/robots.txt"}
    server.clear_log()
    return got


@pytest.mark.timeout(300)
def test_a_run_fetches_only_due_pages_and_new_ones(settings, client, celery_worker):
    adaptive = {"schedule": "ad", "adaptive": True, "min_interval": HOUR, "max_interval": 10 * HOUR}
    with running_sites(["127.0.0.23"], 30, 4, broken_ratio=0, cross_host_ratio=0) as (
        graph,
        (server,),
    ):
        server.etags = half_with_etags
        first = run_at(settings, client, server, T0, **adaptive)
        everything = fetched(server)
        assert len(everything) == first.stats.counters()["fetched"]
        changed, _ = change_site(graph, server, share=0.05, new=0)
        second = run_at(settings, client, server, T0 + HOUR, **adaptive)
        assert fetched(server) == everything  # each page seen once: due after min_interval
        # One observation without a change: the interval doubles (at most), so at +2 h only
        # the pages that changed are due; a new page they now link to is fetched too.
        _, added = change_site(graph, server, share=0.0, new=1, pages=changed)
        third = run_at(settings, client, server, T0 + 2 * HOUR, **adaptive)
        assert fetched(server) == changed | added
        # By +4 h every page is due again (the longest interval yet: 2 x 1 h; a page that
        # changed at each visit is due after min_interval).
        fourth = run_at(settings, client, server, T0 + 4 * HOUR, **adaptive)
        assert fetched(server) == everything | added
    assert second.stats.counters().get("not_due", 0) == 0
    counters = third.stats.counters()
    skipped = len(everything) - len(changed)
    assert counters["not_due"] == skipped
    records = {r["url"]: r for r in third.pages()}
    assert set(records) == everything | added  # every page reached, not-due ones included
    assert sum(bool(r.get("not_due")) for r in records.values()) == skipped
    assert third.summary()["changes"].get("gone", 0) == 0
    assert fourth.stats.counters().get("not_due", 0) == 0


@pytest.mark.timeout(300)
def test_sitemap_lastmod_decides_once_proven_accurate(settings, client, celery_worker):
    """30 pages; 5 change between runs 1 and 2 (each of 30 visits in run 2 checks its lastmod:
    all agree, the host is trusted from then on); 2 change after run 2. At run 3 the estimator
    alone would fetch nothing (no interval has passed): the lastmods fetch exactly those 2."""
    changes = [[0.5 * HOUR] for _ in range(5)] + [[1.2 * HOUR] for _ in range(2)]
    site = SimSite(changes + [[] for _ in range(23)], sitemap=True)
    server = Server(site, "127.0.0.25")
    options = {
        "schedule": "maps",
        "adaptive": True,
        "min_interval": HOUR,
        "max_interval": 10 * HOUR,
        "sitemaps": True,
        "concurrency": 1,  # the sitemap is read before the pages are released
    }
    try:
        for at in (T0, T0 + HOUR):
            site.now = at
            run_at(settings, client, server, at, **options)
        accuracy = Validators(client, Keys(settings.key_prefix), "maps").lastmods
        assert accuracy.trusted(server.base_url + "/p0")
        site.requests, site.held = 0, {}
        site.now = T0 + 1.5 * HOUR
        third = run_at(settings, client, server, site.now, **options)
    finally:
        server.httpd.shutdown()
    assert set(site.held) == {5, 6}
    assert third.stats.counters()["not_due"] == 30 - 2 + 1  # the root too
