"""A directory chunk store that one machine does not share with another (state/store_mark.py,
worker/dispatch/tails_guard.py): the machine that cannot read the first one's mark refuses,
with one line, to tend the crawl's tails; one that can (the same machine, or a shared mount)
tends them."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from pathlib import Path

from crawler_tasks import start_crawl
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.store import CrawlStore, new_crawl_id
from crawler_tasks.state.store_mark import MARK
from crawler_tasks.web.urls import normalize
from crawler_tasks.worker.dispatch.tails_guard import TailsGuard
from tests.support.sitegen import reachable, running_sites

HOSTS = ("a.example", "b.example")


def spilling_crawl(settings, client):  # type: ignore[no-untyped-def]
    """A crawl (no workers) whose hosts each hold a full spill buffer: something to flush."""
    crawl = start_crawl(
        [f"http://{h}/" for h in HOSTS],
        settings=settings,
        client=client,
        rate=math.inf,
        concurrency=1000,
        frontier_head=2,
        frontier_chunk=4,
    )
    crawl.store.frontier.admit((normalize(f"http://{h}/p{i}"), 1) for i in range(20) for h in HOSTS)
    return crawl


def view_from(store: CrawlStore, directory: Path) -> CrawlStore:
    """The same crawl as another machine sees it: its frontier_store path names ``directory``
    there (a local directory of that machine, not the first one's)."""
    opts = dataclasses.replace(store.opts, frontier_store=str(directory))
    return CrawlStore(store.r, opts)


def test_the_machine_without_the_mark_refuses_with_one_line(settings, client, tmp_path, caplog):  # type: ignore[no-untyped-def]
    crawl = spilling_crawl(settings, client)
    here = TailsGuard(host="machine-a")
    assert here.may_tend(crawl.store)
    marks = [p.name for p in Path(crawl.store.opts.frontier_store, crawl.id).iterdir()]
    assert [m for m in marks if m.startswith(MARK)], marks
    assert client.get(crawl.store.ck.store_mark).decode().endswith(" machine-a")
    # Machine b: the same path is an empty directory of its own.
    elsewhere = view_from(crawl.store, tmp_path / "machine-b-disk")
    there = TailsGuard(host="machine-b")
    with caplog.at_level(logging.ERROR, logger="crawler_tasks.worker.dispatch.tails_guard"):
        assert not there.may_tend(elsewhere)
        assert not there.may_tend(elsewhere)  # asked again: refused, not said again
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "machine-b" in lines[0] and "machine-a" in lines[0], lines[0]
    assert "\n" not in lines[0]
    # Machine a still tends: its guard remembers, and a fresh one finds the mark.
    assert TailsGuard(host="machine-a2").may_tend(crawl.store)
    assert crawl.store.frontier.tails.tend(0).flushed > 0


def test_a_shared_directory_is_tended_from_every_machine(settings, client):  # type: ignore[no-untyped-def]
    """Two machines mounting one directory (here: the same path) both tend; one mark."""
    crawl = spilling_crawl(settings, client)
    assert TailsGuard(host="machine-a").may_tend(crawl.store)
    assert TailsGuard(host="machine-b").may_tend(
        view_from(crawl.store, Path(crawl.store.opts.frontier_store))
    )
    marks = [
        p
        for p in Path(crawl.store.opts.frontier_store, crawl.id).iterdir()
        if p.name.startswith(MARK)
    ]
    assert len(marks) == 1, marks


def test_workers_of_a_machine_without_the_mark_leave_the_tails_alone(  # type: ignore[no-untyped-def]
    settings, client, workers, worker_logs
):
    """Real workers whose machine cannot read the mark another machine claimed the crawl for:
    each dispatcher says so once and writes no chunk; the crawl still fetches every page once
    (release.lua tops the heads up from the spill buffers, which stay in Redis)."""
    addresses = [f"127.0.0.{i}" for i in range(50, 53)]
    site = {"broken_ratio": 0, "non_html_ratio": 0, "cross_host_ratio": 0}
    crawl_id = new_crawl_id()
    with running_sites(addresses, 20, 6, **site) as (graph, servers):
        # The claim of a machine whose mark is not in this machine's directory, before start.
        key = Keys(settings.key_prefix).crawl(crawl_id).store_mark  # crawl-wide: no options
        client.set(key, "0123456789abcdef machine-elsewhere")
        seeds = [s.base_url + "/" for s in servers]
        crawl = start_crawl(
            seeds,
            settings=settings,
            crawl_id=crawl_id,
            allow_private_networks=True,
            rate=math.inf,
            concurrency=2,
            frontier_head=2,
            frontier_chunk=2,
        )
        assert crawl.store.ck.store_mark == key
        summary = crawl.wait(timeout=120)
    got = Counter(r["url"] for r in crawl.pages(latest=False))
    assert max(got.values()) == 1
    assert set(got) == {normalize(u) for u in reachable(graph, seeds)}
    assert summary["counters"].get("chunks_written", 0) == 0, summary["counters"]
    logs = "".join(p.read_text(errors="replace") for p in worker_logs.glob("*.log"))
    refusals = [line for line in logs.splitlines() if "does not share" in line]
    assert refusals and all("machine-elsewhere" in line for line in refusals), refusals
    # One line per dispatcher (one per worker main process), not one per round.
    assert len(refusals) <= len(workers), refusals
