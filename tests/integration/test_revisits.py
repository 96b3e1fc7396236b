"""Revisit records (issue 35): the second run of a schedule writes a WARC ``revisit`` record,
not the payload again, for a page that answered 304 or whose payload is the last capture's; each
WARC file begins with a warcinfo record. Checked with warcio and a replay indexer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from crawler_tasks.state.keys import Keys
from crawler_tasks.state.schedules import Schedule, Schedules
from crawler_tasks.surface.figures import crawl_figures
from crawler_tasks.surface.metrics import CrawlCollector
from crawler_tasks.worker.output.warc import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED
from crawler_tasks.worker.process.app import make_app
from tests.support.recrawl_site import (
    change_site,
    half_with_etags,
    run_schedule,
    unresolved,
    warc_records,
    warcio_check,
)
from tests.support.sitegen import running_sites


@pytest.mark.timeout(300)
def test_second_run_writes_revisits_that_resolve_to_the_first_runs_responses(
    settings, client, celery_worker
):
    with running_sites(["127.0.0.21"], 60, 5, broken_ratio=0, cross_host_ratio=0) as (
        graph,
        (server,),
    ):
        server.etags = half_with_etags
        first = run_schedule(settings, server.base_url, "site")
        changed, added = change_site(graph, server, share=0.1, new=2)
        second = run_schedule(settings, server.base_url, "site")
    first_dir, second_dir = Path(first.output_dir), Path(second.output_dir)
    for crawl, directory in ((first, first_dir), (second, second_dir)):
        for _, records in warc_records(directory):
            assert records[0].type == "warcinfo"
            assert f"isPartOf: {crawl.id}\r\n" in records[0].info
            assert "software: crawler-tasks/" in records[0].info
            assert sum(r.type == "warcinfo" for r in records) == 1
        assert warcio_check(directory) == ""
    digests = {
        line
        for d in (first_dir, second_dir)
        for _, rs in warc_records(d)
        for line in rs[0].info.splitlines()
        if "digest" in line
    }
    assert len(digests) == 1  # the same options: the same digest, whatever the crawl id
    records = [r for _, rs in warc_records(second_dir) for r in rs]
    captured = Counter(r.uri for r in records if r.type in ("response", "revisit"))
    assert captured and max(captured.values()) == 1  # one record per URL, revisits included
    full = {r.uri for r in records if r.type == "response"}
    assert full == changed | added
    revisits = [r for r in records if r.type == "revisit"]
    assert {r.uri for r in revisits} == set(captured) - full
    profiles = Counter(
        (r.headers["WARC-Profile"], half_with_etags(r.uri.split(server.netloc)[1]))
        for r in revisits
    )
    # Pages with an ETag answered 304; those without sent the same payload again.
    assert set(profiles) == {(REVISIT_NOT_MODIFIED, True), (REVISIT_IDENTICAL, False)}
    assert all(r.length == 0 for r in revisits)  # headers only, no payload
    assert unresolved(first_dir, second_dir) == []
    pages = {r["url"]: r for r in second.pages()}
    assert {u for u, r in pages.items() if r.get("change") == "changed"} == changed
    _assert_freshness_figures(settings, client, second, changed, revisits, first_dir)


def _assert_freshness_figures(settings, client, second, changed, revisits, first_dir):  # type: ignore[no-untyped-def]
    """The run's freshness figures in status --json, Prometheus and schedule list."""
    first_sizes = {
        r.uri: int(r.headers["Content-Length"])
        for _, rs in warc_records(first_dir)
        for r in rs
        if r.type == "response"
    }
    status = crawl_figures(second).to_json()
    revisited = len(revisits) + len(changed)  # every page but the new ones was seen before
    assert status["revisits"] == revisited
    assert status["revisits_changed"] == len(changed)
    assert status["revisit_records"] == len(revisits)
    # Each revisit saved the payload of the response it points at (its HTTP head aside).
    saved = status["revisit_bytes_saved"]
    assert 0 < saved < sum(first_sizes[r.uri] for r in revisits)
    registry = CollectorRegistry()
    registry.register(CrawlCollector(client, settings))
    text = generate_latest(registry).decode()
    assert f'crawler_revisit_records_total{{crawl="{second.id}"}} {len(revisits)}.0' in text
    assert f'crawler_revisit_bytes_saved_total{{crawl="{second.id}"}} {saved}.0' in text
    Schedules(make_app(settings), client, Keys(settings.key_prefix)).add(
        Schedule("site", ["http://127.0.0.21/"], every_hours=24, check=False)
    )
    listed = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "schedule", "list"]
        + ["--broker", settings.broker_url],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    share = f"{len(changed) / revisited:.1%}"
    assert (
        f"last run {second.id}: revisits={revisited} changed={share} not_due=0 "
        f"revisit_records={len(revisits)} bytes_saved={saved}"
    ) in listed.stdout
