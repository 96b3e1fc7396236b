"""A page parsed in its fetch task has its links' admit.lua calls carried by its WARC
reservation's round trip (respond.py, warc_appends.py, state/scripts.py Carried: issue 32):
one round trip a page fewer, the links admitted before the URL's finish all the same, and a
carried call that Redis refused (memory) or that no round trip carried is sent alone."""

from __future__ import annotations

import pytest
from conftest import redis_reads
from redis.exceptions import OutOfMemoryError, ResponseError
from sitegen import running_sites

from crawler_tasks import start_crawl
from crawler_tasks.state.archive import RESPONSE
from crawler_tasks.state.scripts import Carried
from crawler_tasks.worker import pipeline
from crawler_tasks.worker.app import app
from crawler_tasks.worker.archive_fence import ArchiveFence
from crawler_tasks.worker.output import CrawlOutput
from crawler_tasks.worker.room import Room

SITE = "http://127.0.0.1:9"
WARC = (200, "OK", [("Content-Type", "text/html")], b"<html>x</html>", [])


def _crawl(settings):  # type: ignore[no-untyped-def]
    crawl = start_crawl([f"{SITE}/"], settings=settings, allow_private_networks=True)
    return crawl, crawl.store


def _admitted(store) -> int:  # type: ignore[no-untyped-def]
    return int(store.stats.counters().get("admitted", 0))


def _later(store, links: list[str]) -> Carried:  # type: ignore[no-untyped-def]
    later = Carried(store.admission.client)
    assert store.admission.links(links, 1, None, later) == {}
    assert len(later.calls) == 1  # one partition: one admit.lua call, not sent yet
    return later


def test_a_pages_admissions_ride_in_its_warc_reservation(settings, tmp_path):  # type: ignore[no-untyped-def]
    crawl, store = _crawl(settings)
    later = _later(store, [f"{SITE}/a", f"{SITE}/b"])
    assert _admitted(store) == 1  # the seed only
    out = CrawlOutput(tmp_path / "o", "host-1")
    patience = Room(store.client, 0.9, 1.0).patience
    out.warc(f"{SITE}/d", *WARC, fence=ArchiveFence(store, f"{SITE}/d", RESPONSE, patience))
    # (Its scripts are loaded now.) Without a carrier: the reservation, then the commit
    # (asked alone after HANDOFF_WAIT: no other writer); admissions would go alone after.
    before = redis_reads(store.client)
    out.warc(f"{SITE}/c", *WARC, fence=ArchiveFence(store, f"{SITE}/c", RESPONSE, patience))
    assert redis_reads(store.client) - before - 1 == 2
    fence = ArchiveFence(store, f"{SITE}/", RESPONSE, patience)
    fence.carried = later
    before = redis_reads(store.client)
    out.warc(f"{SITE}/", *WARC, fence=fence)
    # The reservation with both links' admission, then the commit: still two round trips.
    assert redis_reads(store.client) - before - 1 == 2
    assert _admitted(store) == 3
    before = redis_reads(store.client)
    later.settle()  # the replies' follow-up only: nothing sent
    assert redis_reads(store.client) - before - 1 == 0
    assert _admitted(store) == 3
    assert int(store.stats.counters()["queued"]) == 3  # in the frontier, with the seed


def test_admissions_no_round_trip_carried_go_alone(settings):  # type: ignore[no-untyped-def]
    _crawl_, store = _crawl(settings)
    later = _later(store, [f"{SITE}/a"])
    later.settle()
    assert _admitted(store) == 1 + 1
    assert later.take() == []  # settled: nothing left for a carrier


def test_a_carried_admission_refused_for_memory_is_sent_again_alone(settings):  # type: ignore[no-untyped-def]
    """The carrier's round trip came back with admit.lua refused (Redis full): nothing of it
    ran, so it is sent again alone, through the patient client; another error raises."""
    _crawl_, store = _crawl(settings)
    later = _later(store, [f"{SITE}/a"])
    later.take()
    later.replies([OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'")])
    later.settle()
    assert _admitted(store) == 2

    failed = _later(store, [f"{SITE}/b"])
    failed.take()
    failed.replies([ResponseError("ERR something else")])
    with pytest.raises(ResponseError, match="something else"):
        failed.settle()
    assert _admitted(store) == 2


def _one_page_reads(settings, driver, address: str) -> int:  # type: ignore[no-untyped-def]
    """Round trips of one page's fetch task (its links new to the crawl), alone on Redis."""
    with running_sites([address], 6, 3) as (_graph, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True
        )
        ((_d, depth, url),) = crawl.store.frontier.release_all(10, 180).entries
        before = redis_reads(crawl.store.client)
        assert pipeline.fetch_url(driver.ctx, crawl.id, url, depth) == "done"
        reads = redis_reads(crawl.store.client) - before - 1
        assert crawl.stats.counters()["admitted"] > 1  # its links were admitted
    return reads


def test_a_busy_process_carries_the_admissions_one_with_free_threads_does_not(settings, driver):  # type: ignore[no-untyped-def]
    """Where the fetch pool is full (the CPU is the limit: liveness.pool_has_room) a page is
    parsed first and its admissions ride in its WARC reservation's round trip; where threads
    are free, its WARC records go first, as soon as the response is in, and its admissions
    alone: one round trip more, to no thread's wait."""
    _one_page_reads(settings, driver, "127.0.0.95")  # scripts loaded
    busy = _one_page_reads(settings, driver, "127.0.0.96")  # no pool here: no free threads
    app.conf.crawler_pool_slots = 256  # a worker's pool with free threads
    try:
        free = _one_page_reads(settings, driver, "127.0.0.97")
    finally:
        app.conf.crawler_pool_slots = None
    assert free == busy + 1, (busy, free)
