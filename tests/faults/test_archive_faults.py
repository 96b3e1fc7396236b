"""The archive as exact as the records (issue 33): a URL fetched twice because its first
process was killed or frozen has one WARC response record (with its request record) per crawl,
and every WARC file passes ``warcio check``. The crawls are test_faults.py's: a generated site
of 300+ pages, two fetch processes and a parse process, real Redis, real workers."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks import start_crawl
from crawler_tasks.state.archive import RESPONSE, Archive
from crawler_tasks.state.archive import dumps as archive_dumps
from crawler_tasks.state.formats import ArchiveSlot
from crawler_tasks.worker.output import warc_appends
from crawler_tasks.worker.output.archive_fence import ArchiveFence
from crawler_tasks.worker.output.files import CrawlOutput
from crawler_tasks.worker.runtime.room import Room
from tests.faults.test_faults import cluster, site, start, wait
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.recrawl_site import warcio_check
from tests.support.waiting import wait_until


def responses(directory: Path) -> Counter[str]:
    """WARC-Target-URI -> response records, over every WARC file of a crawl."""
    got: Counter[str] = Counter()
    for path in sorted(directory.glob("crawl-*.warc.gz")):
        with open(path, "rb") as f:
            for r in ArchiveIterator(f):
                if r.rec_type == "response":
                    got[r.rec_headers.get_header("WARC-Target-URI")] += 1
    return got


def assert_archive_exact(crawl) -> None:  # type: ignore[no-untyped-def]
    got = responses(crawl.output_dir)
    twice = sorted(u for u, n in got.items() if n > 1)
    assert not twice, f"{len(twice)} URIs with two WARC responses, e.g. {twice[:3]}"
    pages = {r["url"] for r in crawl.pages() if r.get("status") == 200}
    assert len(got) >= len(pages) >= 300  # every fetched page has its response
    assert warcio_check(crawl.output_dir) == ""


def faulty_crawl(c, settings, servers, point: str):  # type: ignore[no-untyped-def]
    """Both fetch processes with the fault point (host affinity may give either both hosts),
    a parse process, and the crawl."""
    for name in ("fetch1", "fetch2"):
        c.start(name, "fetch", {"CRAWLER_FAULT_POINT": point})
    c.start("parse", "parse")
    return start(settings, servers)


@pytest.mark.allow_worker_errors(".*")
def test_fetch_process_killed_after_its_warc_append(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """A fetch process kills itself right after a WARC append (before its commit: the
    reservation is left uncommitted, its file grown) and is restarted; then each fetch
    process is SIGKILLed mid-crawl (scenario B): the URL's records are adopted, never
    written a second time. The first to die is restarted without the fault."""
    with site(delay=0.02) as (graph, servers), cluster(redis_url, tmp_path) as c:
        seeds, crawl = faulty_crawl(c, settings, servers, "after_crawl:20")
        died = lambda: [n for n in ("fetch1", "fetch2") if c.procs[n].poll() is not None]  # noqa: E731
        wait_until(lambda: died() or crawl.finished, timeout=90)
        assert died(), "no fetch process reached its fault point"
        for name in ("fetch1", "fetch2"):
            c.specs[name][3].pop("CRAWLER_FAULT_POINT")
            if name in died():
                c._spawn(name)
        for name in ("fetch1", "fetch2"):
            done = crawl.progress()["done"]
            wait_until(lambda d=done: crawl.progress()["done"] > d + 40 or crawl.finished, 60)
            if crawl.finished:
                break
            if c.procs[name].poll() is None:
                c.kill(name)
            else:  # died at its own fault point meanwhile
                c._spawn(name)
        summary = wait(crawl, 120)
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert_archive_exact(crawl)


def stopped(c, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Is the worker process frozen (SIGSTOP: state T)?"""
    stat = Path(f"/proc/{c.procs[name].pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.allow_worker_errors(".*")
def test_frozen_fetch_process_writes_no_second_response(settings, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    """A fetch process freezes itself right after a WARC append, before its commit, for past
    the dead threshold (scenario E): its URL is taken back and fetched again by the other
    process, which adopts the frozen one's records (its file grew) instead of writing a
    second response; the woken process keeps them. Each that freezes is woken 8 s later."""
    with site(delay=0.02) as (graph, servers), cluster(redis_url, tmp_path) as c:
        seeds, crawl = faulty_crawl(c, settings, servers, "after_crawl:20:stop")
        woken: set[str] = set()
        while not crawl.finished and len(woken) < 2:
            frozen = [n for n in ("fetch1", "fetch2") if n not in woken and stopped(c, n)]
            if not frozen:
                time.sleep(0.1)
                continue
            time.sleep(8)  # dead after 4 s (QUICK): its URLs are fetched again
            for name in frozen:
                c.signal(name, signal.SIGCONT)
                woken.add(name)
        assert woken, "no fetch process froze at its fault point"
        summary = wait(crawl, 120)
        time.sleep(3)  # let the woken process finish what it held
    assert_exact_pages(crawl, reachable_urls(graph, seeds), summary)
    assert_archive_exact(crawl)


def test_a_place_in_the_archive_is_taken_once(settings, tmp_path):  # type: ignore[no-untyped-def]
    """Two writers of one URL on a real Redis: the second writes nothing and gets the first's
    record id; a writer that reserved and then froze before its append loses its place to
    the next writer (its file did not grow) and undoes its late append."""
    crawl = start_crawl(["http://127.0.0.1:9/"], settings=settings, allow_private_networks=True)
    url = "http://127.0.0.1:9/a"
    room = Room(crawl.store.client, fraction=0.9, patience=1.0)
    a = CrawlOutput(tmp_path / "a", "host-1")
    b = CrawlOutput(tmp_path / "b", "host-2")
    warc = ("200", "OK", [("Content-Type", "text/html")], b"<html>x</html>", [])
    first = a.warc(
        url, 200, *warc[1:], fence=ArchiveFence(crawl.store, url, RESPONSE, room.patience)
    )
    again = b.warc(
        url, 200, *warc[1:], fence=ArchiveFence(crawl.store, url, RESPONSE, room.patience)
    )
    assert again == first and not (tmp_path / "b").exists()
    assert responses(tmp_path / "a") == {url: 1}

    other = "http://127.0.0.1:9/b"
    archive = Archive(crawl.store.client, crawl.store.ck, crawl.store.ledger.scripts)
    frozen = ArchiveSlot("<urn:uuid:frozen>", str(tmp_path / "c" / "crawl-x.warc.gz"), 0)
    assert archive.reserve(RESPONSE, other, frozen).write
    taken = b.warc(
        other, 200, *warc[1:], fence=ArchiveFence(crawl.store, other, RESPONSE, room.patience)
    )
    assert taken != frozen.rid
    kept, instead = archive.commit(RESPONSE, other, frozen.rid)  # the frozen writer wakes
    assert not kept and instead == taken
    assert responses(tmp_path / "b") == {other: 1}


def test_a_commit_asked_by_the_next_writer_undoes_a_lost_place(settings, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """An append's commit rides with the next writer's reservation (warc_appends.py, one round
    trip): when the place was taken over meanwhile, the next writer truncates that append at
    the file's end before its own, which lands where the lost one began (warcinfo first)."""
    crawl = start_crawl(["http://127.0.0.1:9/"], settings=settings, allow_private_networks=True)
    store, (x, y) = crawl.store, ("http://127.0.0.1:9/x", "http://127.0.0.1:9/y")
    room = Room(store.client, fraction=0.9, patience=1.0)
    out = CrawlOutput(tmp_path / "o", "host-1")
    warc = (200, "OK", [("Content-Type", "text/html")], b"<html>x</html>", [])
    monkeypatch.setattr(warc_appends, "HANDOFF_WAIT", 60.0)  # x waits for the next writer
    got: dict[str, str] = {}
    writer = threading.Thread(
        target=lambda: got.update(x=out.warc(x, *warc, fence=ArchiveFence(store, x, RESPONSE, 1.0)))
    )
    writer.start()
    wait_until(lambda: out._warc.unsettled is not None, timeout=10)
    lost = out._warc.unsettled
    archive = Archive(store.client, store.ck, store.ledger.scripts)
    mine = ArchiveSlot(lost.rid, str(tmp_path / "o" / "crawl-host-1.warc.gz"), lost.at)
    taker = ArchiveSlot("<urn:uuid:taker>", str(tmp_path / "elsewhere.warc.gz"), 0)
    assert archive.reserve(RESPONSE, x, taker, taking=archive_dumps(mine)).write
    assert archive.commit(RESPONSE, x, taker.rid)[0]
    monkeypatch.setattr(warc_appends, "HANDOFF_WAIT", 0.02)  # y asks its own commit soon
    fence = ArchiveFence(store, y, RESPONSE, room.patience)
    got["y"] = out.warc(y, *warc, fence=fence)
    writer.join(10)
    assert got["x"] == taker.rid and got["y"] != taker.rid
    assert responses(tmp_path / "o") == {y: 1}
    assert warcio_check(tmp_path / "o") == ""
    assert archive.commit(RESPONSE, y, got["y"]) == (True, "")  # y's place is y's
