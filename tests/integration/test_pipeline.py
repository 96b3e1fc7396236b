"""The pipeline in-process (tests/support/driver.py): real Redis, real HTTP servers, the real
dispatcher and pipeline in the test's thread; no worker processes. Fast enough to cover the
crawl's behaviour in detail; test_crawl.py proves the same with real Celery workers."""

from __future__ import annotations

import bisect
import math
import socket
import time
from collections import Counter
from urllib.parse import urldefrag, urlsplit

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.state.formats import Committed, Unwritten
from crawler_tasks.state.store import CrawlStore
from crawler_tasks.state.summary import Summary
from crawler_tasks.surface.crawl import list_crawls
from crawler_tasks.surface.summary import summary_text
from crawler_tasks.web.urls import normalize
from crawler_tasks.worker.visit.outcome import Final
from crawler_tasks.worker.visit.recorder import write_orphan
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.key_table import undescribed
from tests.support.sitegen import (
    SiteServer,
    has_skipped_extension,
    reachable,
    running_sites,
    serve_hosts,
)


def start(settings, servers, **options):  # type: ignore[no-untyped-def]
    seeds = [s.base_url + "/" for s in servers]
    hosts = [s.address for s in servers]
    opts = {"allow_private_networks": True, "allowed_domains": hosts, "rate": math.inf}
    return seeds, start_crawl(seeds, settings=settings, **{**opts, "concurrency": 4, **options})


def pages(crawl) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(r["url"] for r in crawl.pages(latest=False))


@pytest.mark.parametrize("partitions", [1, 4])  # with 4, the two hosts are in 0 and 1
def test_exact_reachable_set_with_counters(settings, driver, partitions):  # type: ignore[no-untyped-def]
    with running_sites(["127.0.0.70", "127.0.0.71"], 80, 6) as (graph, servers):
        seeds, crawl = start(settings, servers, partitions=partitions)
        summary = driver.run(crawl)
    # Seeds count as discovered: every link is admitted, a duplicate or skipped for a reason.
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)


@pytest.mark.parametrize(("max_depth", "max_pages"), [(1, 0), (None, 25), (2, 10)])
def test_depth_and_page_limits(settings, driver, max_depth, max_pages):  # type: ignore[no-untyped-def]
    with running_sites(["127.0.0.72"], 60, 5) as (graph, servers):
        seeds, crawl = start(settings, servers, max_depth=max_depth, max_pages=max_pages)
        driver.run(crawl)
    got = pages(crawl)
    allowed = {normalize(u) for u in reachable(graph, seeds, max_depth=max_depth)}
    assert set(got) <= allowed
    if max_pages:
        assert len(got) == max_pages
    else:
        assert set(got) == allowed
    assert all(r["depth"] <= (max_depth if max_depth is not None else 99) for r in crawl.pages())


def test_dfs_goes_deep_before_wide(settings, driver):  # type: ignore[no-untyped-def]
    """One connection and LIFO per domain: after the seed, the next page fetched is the last
    link the seed's parse admitted, and its children come before the seed's other links."""
    with running_sites(["127.0.0.73"], 30, 4, cross_host_ratio=0) as (_graph, servers):
        seeds, crawl = start(settings, servers, order="dfs", concurrency=1)
        driver.run(crawl)
        order = [e.path for e in servers[0].requests() if e.path != "/robots.txt"]
    depth = {r["url"].split(servers[0].netloc, 1)[1]: r["depth"] for r in crawl.pages()}
    depths = [depth.get(p, 0) for p in order]
    assert depths[:3] == [0, 1, 2], depths[:10]


def test_include_exclude_through_start_crawl(settings, driver):  # type: ignore[no-untyped-def]
    with running_sites(["127.0.0.74"], 60, 6) as (_graph, servers):
        _seeds, crawl = start(settings, servers, include=[r"/$", r"/d0/"], exclude=[r"p1\d$"])
        summary = driver.run(crawl)
    paths = {r["url"].split(servers[0].netloc, 1)[1] for r in crawl.pages()}
    assert "/" in paths and len(paths) > 3
    assert all(p == "/" or (p.startswith("/d0/") and not p[-2:-1].isdigit()) or True for p in paths)
    assert all(p == "/" or p.startswith("/d0/") for p in paths)
    assert not any(p.startswith("/d0/p1") and len(p) == len("/d0/p10") for p in paths)
    assert summary["skipped"].get("excluded", 0) + summary["skipped"].get("not_included", 0) > 0


def test_the_crawls_own_request_settings_are_sent(settings, driver):  # type: ignore[no-untyped-def]
    """User agent, retries and limits come from the crawl's options, not from the worker's
    settings: a 503 page is tried 1 + max_retries times; the User-Agent is the crawl's."""
    routes = {"/busy": lambda h: h.send_body(503, b"busy", "text/plain")}
    with serve_hosts(None, ["127.0.0.75"], extra_routes=routes) as (server,):
        crawl = start_crawl(
            [server.base_url + "/busy"],
            settings=settings,
            allow_private_networks=True,
            obey_robots=False,
            rate=math.inf,
            user_agent="probe-bot/9.9",
            max_retries=2,
            retry_backoff=0.01,
            retry_backoff_max=0.02,
        )
        summary = driver.run(crawl)
        seen = server.requests()
    assert [e.path for e in seen] == ["/busy"] * 3
    # Every response is in the status histogram, the retried 5xx ones too.
    assert summary["status_codes"] == {"503": 3}
    assert {e.headers.get("User-Agent") for e in seen} == {"probe-bot/9.9"}
    (record,) = crawl.pages()
    assert (record["error"], record["attempts"]) == ("server_error", 3)


def test_cancel_drains_the_frontier_as_cancelled(settings, driver):  # type: ignore[no-untyped-def]
    with running_sites(["127.0.0.76"], 60, 6) as (_graph, servers):
        _seeds, crawl = start(settings, servers, concurrency=1)
        while crawl.progress()["done"] < 3:
            driver.step()
        crawl.cancel()
        summary = driver.run(crawl)
    records = list(crawl.pages())
    assert summary["status"] == "cancelled"
    # The URLs a cancel dropped are counted (in bulk, cancel.lua), never written: every
    # record is a URL that reached a final state of its own; each admitted URL is one or
    # the other, once.
    cancelled = summary["counters"]["cancelled"]
    assert cancelled > 0 and not [r for r in records if r["error"] == "cancelled"]
    assert len(records) + cancelled == summary["counters"]["admitted"]
    # One count everywhere: `done` is what reached a final state of its own, never the
    # URLs a cancel dropped (the Ctrl-C summary, status, list, summary.json alike).
    done = len(records)
    assert len(records) == len({r["url"] for r in records})
    assert summary["counters"]["done"] == crawl.progress()["done"] == done
    (listed,) = list_crawls(crawl.client, crawl.store.r.keys)
    assert listed["done"] == done
    assert f"pages: {done} done" in summary_text(Summary.from_json(summary))


def test_every_key_a_crawl_writes_is_in_the_table(settings, driver, client):  # type: ignore[no-untyped-def]
    """Sitemaps, a recrawl schedule, per-host caps, redirects, retries and robots.txt: the
    crawl writes most kinds of key; each must match a row of keys.py's table."""
    hits = {"n": 0}

    def flaky(h) -> None:  # type: ignore[no-untyped-def]
        hits["n"] += 1
        status = 503 if hits["n"] == 1 else 200
        h.send_body(status, b"<html><a href='/'>home</a></html>", "text/html")

    sitemap = b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'><url><loc>/flaky</loc></url></urlset>"
    routes = {
        "/moved": lambda h: h.redirect("/"),
        "/flaky": flaky,
        "/sitemap.xml": lambda h: h.send_body(200, sitemap, "application/xml"),
    }
    with running_sites(["127.0.0.77"], 20, 4, extra_routes=routes) as (_graph, servers):
        base = servers[0].base_url
        for s in servers:
            s.robots_txt = f"User-agent: *\nDisallow: /d0/p1\nSitemap: {base}/sitemap.xml\n"
        crawl = start_crawl(
            [base + "/", base + "/moved", base + "/flaky"],
            settings=settings,
            allow_private_networks=True,
            rate=math.inf,
            sitemaps=True,
            max_pages_per_host=15,
            schedule="probe",
            retry_backoff=0.01,
            retry_backoff_max=0.02,
        )
        driver.run(crawl)
    assert undescribed(client) == []
    kinds = {
        k.decode().split(":")[2]
        for pattern in crawl.store.ck.patterns
        for k in client.scan_iter(match=pattern)
    }
    assert {"config", "state", "stats", "bloom", "hostpages", "sitemaps", "smo", "persec"} <= kinds


def test_a_store_is_the_same_for_the_shell_and_the_worker(settings, driver):  # type: ignore[no-untyped-def]
    crawl = start_crawl(["http://127.0.0.78/"], settings=settings, allow_private_networks=True)
    worker_side = driver.ctx.store(crawl.id)
    assert isinstance(worker_side, CrawlStore)
    assert worker_side.opts == crawl.options
    assert driver.ctx.store(crawl.id) is worker_side  # cached per process
    assert driver.ctx.store("no-such-crawl") is None


def test_politeness_holds_in_process_too(settings, driver):  # type: ignore[no-untyped-def]
    """Two requests per second to one host, burst 0, with the driver never waiting on anything
    but release.lua and the send gate. Judged on two clocks:

    * the client's send stamps (``Response.sent_at``: time.monotonic() right after the
      request was written; a stamp can only come late, which makes a gap look shorter, never
      longer): every gap >= 0.5 s - 0.02 s (the scheduling noise of taking the stamp);
    * the server's arrival stamps, at most rate + 1 = 3 requests in any 1-s window (issue 31's
      rule). Not the gaps themselves: the server's handler threads live in this process, and
      its stamp is taken only once a handler thread got the GIL and the CPU to read the
      request. Under load that comes late for one request and not the next: with two CPU hogs
      beside this test, a server gap of 0.408 s was measured whose client send gap was
      0.528 s (the first request stamped 0.127 s late), while no client gap over 12 runs was
      below 0.501 s: the failure "a 0.42 s gap right after a 1.37 s gap" was such a stamp.
    Every request the server saw is one the client sent (none bypassed the gate unseen)."""
    sent: dict[str, float] = {}
    real_get = driver.ctx.fetcher.get

    def get(url, **kw):  # type: ignore[no-untyped-def]
        response = real_get(url, **kw)  # the real fetch; only its send stamp is noted
        sent[url] = response.sent_at
        return response

    driver.ctx.fetcher.get = get
    with running_sites(["127.0.0.79"], 12, 3, cross_host_ratio=0) as (_graph, servers):
        server: SiteServer = servers[0]
        crawl = start_crawl(
            [server.base_url + "/"],
            settings=settings,
            allow_private_networks=True,
            rate=2.0,
            burst=0,
            obey_robots=False,
        )
        driver.run(crawl)
        arrived = sorted(e.time for e in server.requests())
        paths = sorted(server.base_url + e.path for e in server.requests())
    assert len(arrived) >= 8
    assert sorted(sent) == paths  # one send stamp per request the server saw
    sends = sorted(sent.values())
    gaps = [b - a for a, b in zip(sends, sends[1:], strict=False)]
    assert min(gaps) >= 0.5 - 0.02, gaps
    assert sends[-1] - sends[0] >= 0.5 * (len(sends) - 1) - 0.02
    in_1s = max(bisect.bisect_left(arrived, t + 1.0) - i for i, t in enumerate(arrived))
    assert in_1s <= 2 + 1, arrived


def test_an_orphan_met_by_two_rescuers_is_written_once(settings, driver):  # type: ignore[no-untyped-def]
    """A process died between finish.lua and its page line. Its redelivered task and the
    dispatcher's sweep (or the finisher) read the orphan before either wrote it: the first
    writes it, the second, holding what it read before, leaves it."""
    crawl = start_crawl(["http://127.0.0.79/a"], settings=settings, allow_private_networks=True)
    store = driver.ctx.store(crawl.id)
    [(_domain, _depth, url)] = store.frontier.release_all(10, 180).entries
    dead = crawl.output_dir / f"pages-{socket.gethostname()}-1.jsonl"  # it wrote nothing
    record = {**Final(url, 0, status=200, extra={"fetched_at": time.time()}).record(), "rid": "r"}
    assert store.ledger.finish(url, Unwritten("r", str(dead), time.time(), record), {}) == 0
    [(_url, seen)], _young = store.unwritten.orphans(0)
    assert write_orphan(driver.ctx, store, url, seen)
    assert not write_orphan(driver.ctx, store, url, seen)
    assert [r["url"] for r in crawl.pages(latest=False)] == [url]
    assert store.unwritten.get(url) is None


def test_a_writer_frozen_across_a_takeover_undoes_its_copy(settings, driver):  # type: ignore[no-untyped-def]
    """A process froze after finish.lua (SIGSTOP, a paused VM), perhaps in the middle of its
    append; meanwhile another took its record over (claim.lua) to write it. The first wakes
    and appends: its copy is undone (commit.lua), its file back to what it was. Without a
    takeover the same append is kept, and so it is when a sweep only found it on disk."""
    crawl = start_crawl(["http://127.0.0.79/a"], settings=settings, allow_private_networks=True)
    store = driver.ctx.store(crawl.id)
    [(_domain, _depth, url)] = store.frontier.release_all(10, 180).entries
    out = driver.ctx.crawl_runtime(store).output()
    record = {**Final(url, 0, status=200, extra={"fetched_at": time.time()}).record(), "rid": "r"}
    mine = Unwritten("r", str(out.pages_path), time.time(), record)
    assert store.ledger.finish(url, mine, {}) == 0
    elsewhere = Unwritten(
        "r", str(crawl.output_dir / "pages-elsewhere-2.jsonl"), time.time(), record
    )
    assert store.unwritten.claim(url, mine, elsewhere)  # the sweep of another process

    def commit(entry):  # type: ignore[no-untyped-def]
        return lambda: store.unwritten.commit(entry.record["url"], entry) is not Committed.MOVED

    out.final({"url": "http://127.0.0.79/other", "rid": "x"})  # the file holds something
    size = out.pages_path.stat().st_size
    assert not out.final(record, commit=commit(mine))
    assert out.pages_path.stat().st_size == size  # undone, to the byte
    assert store.unwritten.commit(url, elsewhere) is Committed.OURS  # the claimer's copy counts
    assert store.unwritten.get(url) is None
    assert out.final(record, commit=commit(mine)) is False  # gone, fenced: still not ours

    other = "http://127.0.0.79/b"
    entry = Unwritten("s", str(out.pages_path), time.time(), {**record, "url": other, "rid": "s"})
    store.client.hset(store.ck.for_url(other).unwritten, other, entry.dumps())
    assert out.final(entry.record, commit=commit(entry))  # nobody took it over: kept, written
    assert store.unwritten.get(other) is None
    assert store.unwritten.commit(other, entry) is Committed.FOUND  # a sweep found it: keep
    urls = [r["url"] for r in crawl.pages(latest=False)]
    assert urls.count(url) == 0 and urls.count(other) == 1


def test_robots_disallowed_links_are_counted_never_fetched_nor_recorded(settings, driver):  # type: ignore[no-untyped-def]
    """Links robots.txt refuses: once this process holds the rules, admission counts them
    (no queue entry, no fetch task); either way no request and no output line, and each
    refused URL is counted once however many pages link it."""
    with running_sites(["127.0.0.69"], 150, 6, robots_txt="User-agent: *\nDisallow: /d1/\n") as (
        graph,
        servers,
    ):
        seeds, crawl = start(settings, servers)
        summary = driver.run(crawl)
        requested = {e.path for e in servers[0].requests()}

    def refused(url: str) -> bool:
        return urlsplit(url).path.startswith("/d1/")

    fetched = {normalize(u) for u in reachable(graph, seeds, refused=refused)}
    html = [graph.pages[u] for u in fetched if u in graph.pages and graph.pages[u].is_html]
    linked = {normalize(urldefrag(link)[0]) for page in html for link in page.links}
    disallowed = {u for u in linked if refused(u) and not has_skipped_extension(u)}
    got = pages(crawl)
    assert disallowed and set(got) == fetched and max(got.values()) == 1
    assert not any(p.startswith("/d1/") for p in requested)
    c = summary["counters"]
    assert c["robots_disallowed"] == len(disallowed)
    assert summary["skipped"].get("robots_disallowed", 0) > 0  # judged at admission
    assert c["discovered"] == c["admitted"] + c["deduplicated"] + sum(summary["skipped"].values())
    assert summary["status"] == "finished"


def test_cancel_while_urls_wait_for_a_retry_finishes(settings, driver):  # type: ignore[no-untyped-def]
    """A URL waiting out a retry's back-off is dropped by a cancel too (it used to wait for a
    release that a cancelled crawl never does: the crawl never finished)."""
    busy = {"/": lambda h: h.send_body(503, b"busy", "text/html")}
    with serve_hosts(None, ["127.0.0.79"], extra_routes=busy) as (server,):
        crawl = start_crawl(
            [server.base_url + "/"], settings=settings, allow_private_networks=True,
            obey_robots=False, rate=math.inf, retry_backoff=60.0,
        )  # fmt: skip
        while crawl.stats.progress().to_json()["retrying"] == 0:
            driver.step()
        assert crawl.cancel()
        summary = driver.run(crawl)
    assert summary["status"] == "cancelled"
    assert summary["counters"]["cancelled"] == 1


def test_nothing_is_released_once_pause_returns(settings):  # type: ignore[no-untyped-def]
    """A dispatcher that read "run" just before pause() still releases nothing after it:
    release.lua reads each partition's copy of the paused flag itself."""
    from crawler_tasks.state.formats import Steering

    seeds = [f"http://127.0.0.80:9/{i}" for i in range(3)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True, rate=math.inf)
    crawl.pause()

    def release():  # type: ignore[no-untyped-def]
        return crawl.store.frontier.release(0, 100, 180.0, "w", state=Steering.RUN).entries

    assert release() == []
    crawl.resume()
    assert len(release()) == 1  # concurrency 1: one of the host's URLs


def test_event_signals_reach_a_receiver_connected_in_the_process(settings, driver):  # type: ignore[no-untyped-def]
    """The public signals (made on first use, state/events.py): a receiver connected before
    the crawl gets every page (fetched or failed: a missing one) and then the end."""
    import crawler_tasks

    got: list[tuple[str, str, str]] = []

    def on_page(sender, crawl_id, record, **_):  # type: ignore[no-untyped-def]
        got.append(("page", crawl_id, record["url"]))

    def on_end(sender, crawl_id, summary, **_):  # type: ignore[no-untyped-def]
        got.append(("end", crawl_id, summary["status"]))

    signals = [crawler_tasks.request_completed, crawler_tasks.request_failed]
    for signal in signals:
        signal.connect(on_page)
    crawler_tasks.crawl_finished.connect(on_end)
    try:
        with running_sites(["127.0.0.110"], 6, 2) as (_, servers):
            _, crawl = start(settings, servers)
            driver.run(crawl)
    finally:
        for signal in signals:
            signal.disconnect(on_page)
        crawler_tasks.crawl_finished.disconnect(on_end)
    assert sorted(u for kind, _, u in got if kind == "page") == sorted(pages(crawl))
    assert got[-1] == ("end", crawl.id, "finished")
    assert {crawl_id for _, crawl_id, _ in got} == {crawl.id}
