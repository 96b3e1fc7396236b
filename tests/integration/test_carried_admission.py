"""A page parsed in its fetch task has its links' admit.lua calls carried by its WARC
reservation's round trip (respond.py, warc_appends.py, state/scripts.py Carried: issue 32):
one round trip a page fewer, the links admitted before the URL's finish all the same, and a
carried call that Redis refused (memory) or that no round trip carried is sent alone."""

from __future__ import annotations

import gc
import threading

import pytest
from celery import current_app
from redis.exceptions import OutOfMemoryError, ResponseError

from crawler_tasks import start_crawl
from crawler_tasks.state.archive import RESPONSE
from crawler_tasks.state.scripts import Carried
from crawler_tasks.web.fetcher import Response
from crawler_tasks.worker.output.archive_fence import ArchiveFence
from crawler_tasks.worker.output.files import CrawlOutput
from crawler_tasks.worker.runtime.room import Room
from crawler_tasks.worker.visit import pipeline
from tests.support.round_trips import RoundTrips
from tests.support.sitegen import running_sites

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
    with RoundTrips() as trips:
        out.warc(f"{SITE}/c", *WARC, fence=ArchiveFence(store, f"{SITE}/c", RESPONSE, patience))
    assert trips.count == 2
    fence = ArchiveFence(store, f"{SITE}/", RESPONSE, patience)
    fence.carried = later
    with RoundTrips() as trips:
        out.warc(f"{SITE}/", *WARC, fence=fence)
    # The reservation with both links' admission, then the commit: still two round trips.
    assert trips.count == 2
    assert _admitted(store) == 3
    with RoundTrips() as trips:
        later.settle()  # the replies' follow-up only: nothing sent
    assert trips.count == 0
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


def _after_reservation(settings, driver, address: str, waiting: bool = True) -> str:  # type: ignore[no-untyped-def]
    """One page's fetch task (its links new to the crawl), watched with MONITOR: the script
    its fetch process sent next after its WARC reservation, on the same connection.
    ``waiting``: a second URL of its host waits for the page's slot (concurrency 1):
    release.lua marks the host "aw", so the fetch is ``awaited``."""
    with running_sites([address], 6, 3) as (_graph, servers):
        base = servers[0].base_url
        seeds = [base + "/", base + "/later"][: 2 if waiting else 1]
        crawl = start_crawl(seeds, settings=settings, allow_private_networks=True)
        ((_d, depth, url),) = crawl.store.frontier.release_all(10, 180).entries
        assert url == base + "/"
        scripts = crawl.store.ledger.scripts
        names = {scripts.admit.sha: "admit", scripts.archive_commit.sha: "archive_commit"}
        names.update({scripts.finish.sha: "finish", scripts.done.sha: "done"})
        for script in vars(scripts).values():  # loaded: no NOSCRIPT reruns in the watch
            crawl.store.client.script_load(script.script)
        sent = _watched(
            crawl.store.client, lambda: pipeline.fetch_url(driver.ctx, crawl.id, url, depth)
        )
        assert crawl.stats.counters()["admitted"] > len(seeds)  # its links were admitted
    reserve = scripts.archive_reserve.sha
    ((i, port),) = [(i, p) for i, (p, cmd) in enumerate(sent) if f"EVALSHA {reserve}" in cmd]
    after = next(cmd for p, cmd in sent[i + 1 :] if p == port and cmd.startswith("EVALSHA"))
    return names.get(after.split()[1], after[:60])


def _watched(client, action) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(client port, command) of each command sent by a client while ``action`` runs (not
    those a script runs)."""
    got: list[tuple[str, str]] = []
    ready = threading.Event()

    def watch() -> None:
        with client.monitor() as m:
            ready.set()
            while True:
                c = m.next_command()
                if "stop-watching" in c["command"]:
                    return
                if c["client_type"] != "lua":
                    got.append((c["client_port"], c["command"]))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(10)
    action()
    client.echo("stop-watching")
    watcher.join(10)
    return got


def test_records_first_where_the_host_waits_and_threads_are_free(settings, driver):  # type: ignore[no-untyped-def]
    """Where the host's next URL waits for this slot and the process has free threads
    (liveness.pool_has_room), a page's WARC records go first, as soon as the response is
    in, and its admissions alone after them. A full pool (the CPU is the limit; in-process
    there is no pool), or a host whose next URL waits for nothing, carries them in the WARC
    reservation's round trip."""
    assert _after_reservation(settings, driver, "127.0.0.96") == "admit"
    # A worker's pool with free threads, on the app pool_has_room reads (another test's
    # Celery fixture may have made its own app the current one).
    conf = current_app.conf
    conf.crawler_pool_slots = 256
    try:
        assert _after_reservation(settings, driver, "127.0.0.97") != "admit"
        assert _after_reservation(settings, driver, "127.0.0.98", waiting=False) == "admit"
    finally:
        conf.crawler_pool_slots = None


def test_a_fetch_task_leaves_no_response_for_the_garbage_collector(settings, driver):  # type: ignore[no-untyped-def]
    """A page's response (its body) is freed when its fetch task returns, by reference
    counting: nothing of it sits in a reference cycle until the next collection (a lambda
    holding the Decision that held it kept every response of a broad crawl's pages for the
    collector: +100 MB of peak RSS a fetch process)."""
    with running_sites(["127.0.0.99"], 6, 3) as (_graph, servers):
        base = servers[0].base_url
        crawl = start_crawl(
            [base + "/", base + "/later"], settings=settings, allow_private_networks=True
        )
        ((_d, depth, url),) = crawl.store.frontier.release_all(10, 180).entries
        # Loaded first: a script Redis does not hold yet is run again after NOSCRIPT, whose
        # exception's traceback holds the frames it went through (once per script).
        for script in vars(crawl.store.ledger.scripts).values():
            crawl.store.client.script_load(script.script)
        gc.collect()
        gc.disable()
        try:
            assert pipeline.fetch_url(driver.ctx, crawl.id, url, depth) == "done"
            left = [o for o in gc.get_objects() if isinstance(o, Response)]
        finally:
            gc.enable()
    assert left == []
