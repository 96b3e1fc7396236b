"""Periodic recrawls: a real celery beat (RedBeat) starts runs of a schedule; the second run sends
the first run's validators and a server that honours them answers 304."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from redbeat.schedulers import RedBeatSchedulerEntry, ensure_conf

from crawler_tasks import Crawl
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.schedules import Schedule, Schedules
from crawler_tasks.surface.embedded import stop_process
from crawler_tasks.worker.process.app import make_app
from tests.support.waiting import wait_until


class VersionedSite(BaseHTTPRequestHandler):
    """Five pages with ETags; /news changes on every request; /old exists in version 1 only."""

    version = 1
    conditional_hits: list[str] = []

    def pages(self) -> dict[str, str]:
        links = ["/a", "/b", "/news"] + (["/old"] if self.version == 1 else [])
        pages = {
            "/": "".join(f'<a href="{p}">{p}</a>' for p in links),
            "/a": '<a href="/b">b</a>',
            "/b": '<a href="/">home</a>',
            "/news": "",
        }
        if self.version == 1:
            pages["/old"] = "old page"
        return pages

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        body = self.pages().get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/news":
            body = f"<title>news</title>{threading.get_ident()}{os.urandom(4).hex()}"
        html = f"<html><head><title>{self.path}</title></head><body>{body}</body></html>".encode()
        etag = '"' + hashlib.md5(html).hexdigest() + '"'
        if self.path != "/news" and self.headers.get("If-None-Match") == etag:
            type(self).conditional_hits.append(self.path)
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(html)))
        if self.path != "/news":
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(html)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def versioned_site() -> Iterator[str]:
    VersionedSite.version = 1
    VersionedSite.conditional_hits = []
    server = ThreadingHTTPServer(("127.0.0.14", 0), VersionedSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.14:{server.server_address[1]}/"
    server.shutdown()


def due_now(app, name: str) -> None:  # type: ignore[no-untyped-def]
    """Moves the RedBeat entry of schedule ``name`` back by one period: due at beat's next
    tick (at most ``beat_max_loop_interval`` away). Added, a schedule is first due one period
    later (celery's rule for a new entry)."""
    entry = RedBeatSchedulerEntry.from_key(f"{app.conf.redbeat_key_prefix}crawl:{name}", app=app)
    entry.reschedule(last_run_at=entry.last_run_at - entry.schedule.run_every)


def test_beat_runs_a_schedule_and_the_second_run_gets_304s(
    settings, redis_url, workers, worker_logs, versioned_site, tmp_path
):
    app = make_app(settings)
    client = Crawl("x", settings=settings).client
    schedules = Schedules(app, client, Keys(settings.key_prefix))
    output = str(tmp_path / "out")
    # Hourly, made due at once each time it is added, and removed as soon as its run appears:
    # beat starts exactly one run per add, and the site changes between the runs, never during
    # one, however long beat, the workers or a run take on a loaded machine.
    site = Schedule(
        "site",
        [versioned_site],
        every_hours=1,
        options={"allow_private_networks": True, "rate": 50.0, "output": output},
    )

    def one_run() -> Crawl:
        before = set(schedules.runs("site"))
        schedules.add(site)
        due_now(app, "site")
        new = wait_until(lambda: set(schedules.runs("site")) - before, timeout=40)
        schedules.remove("site")
        (crawl_id,) = new
        return Crawl(crawl_id, settings=settings)

    empty = str(tmp_path / "schedules.toml")  # beat loads no schedule from a file
    Path(empty).write_text("")
    # Its log with the workers': a traceback in beat fails the test too.
    with open(worker_logs / "beat.log", "ab") as beat_log:
        beat = subprocess.Popen(
            [
                *[sys.executable, "-m", "celery", "-A", "crawler_tasks", "beat"],
                *["--loglevel", "INFO", "-s", str(tmp_path / "beat-schedule")],
            ],
            env={**os.environ, "CRAWLER_BROKER_URL": redis_url, "CRAWLER_SCHEDULES_FILE": empty},
            stdout=beat_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # Beat holds RedBeat's lock from just before its first tick: it is up.
            lock = ensure_conf(app).lock_key
            wait_until(lambda: client.exists(lock), timeout=60)
            first = one_run()
            first.wait(timeout=30)
            VersionedSite.version = 2
            second = one_run()
            summary = second.wait(timeout=30)
        finally:
            stop_process(beat)
    first_id, second_id = first.id, second.id
    assert second.options.schedule == "site" and second_id != first_id
    first_urls = {r["url"] for r in first.pages()}
    records = {r["url"]: r for r in second.pages()}
    assert set(records) == first_urls - {versioned_site + "old"}
    assert records[versioned_site + "a"]["status"] == 304
    assert records[versioned_site + "a"]["change"] == "not_modified"
    assert records[versioned_site + "news"]["change"] == "changed"
    assert records[versioned_site]["change"] == "changed"  # /old is no longer linked
    assert "/a" in VersionedSite.conditional_hits and "/b" in VersionedSite.conditional_hits
    # /b is reached only through /a, which was not re-parsed: its links came from run one.
    assert summary["changes"]["not_modified"] == 2
    assert summary["changes"]["gone"] == 1
