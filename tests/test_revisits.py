"""Revisit records (issue 35): the second run of a schedule writes a WARC ``revisit`` record,
not the payload again, for a page that answered 304 or whose payload is the last capture's; each
WARC file begins with a warcinfo record. Checked with warcio and a replay indexer."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from recrawl_site import change_site, half_with_etags, unresolved, warc_records, warcio_check
from sitegen import running_sites

from crawler_tasks import start_crawl
from crawler_tasks.web.captures import Capture, payload_digest, warc_date
from crawler_tasks.worker.warc import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED


def test_a_capture_packs_in_32_bytes_and_keeps_its_date_to_the_microsecond():
    url = "http://a.test/page"
    capture = Capture(payload_digest(b"x"), 1_795_000_000_123_456, url, 1)
    packed = capture.pack(url)
    assert len(packed) == 32
    assert Capture.unpack(url, packed) == capture
    assert capture.date == "2026-11-18T11:06:40.123456Z" == warc_date(capture.micros)
    moved = Capture(capture.digest, capture.micros, "http://a.test/moved", 1)
    assert Capture.unpack(url, moved.pack(url)) == moved  # a redirect's target is kept


def run(settings, server, schedule: str):  # type: ignore[no-untyped-def]
    host = server.base_url.split("//")[1].split(":")[0]
    crawl = start_crawl(
        [server.base_url + "/"],
        settings=settings,
        schedule=schedule,
        allow_private_networks=True,
        allowed_domains=[host],
        rates={host: math.inf},
        rate=math.inf,
        concurrency=4,
    )
    crawl.wait(timeout=120)
    return crawl


@pytest.mark.timeout(300)
def test_second_run_writes_revisits_that_resolve_to_the_first_runs_responses(
    settings, celery_worker
):
    with running_sites(["127.0.0.21"], 60, 5, broken_ratio=0, cross_host_ratio=0) as (
        graph,
        (server,),
    ):
        server.etags = half_with_etags
        first = run(settings, server, "site")
        changed, added = change_site(graph, server, share=0.1, new=2)
        second = run(settings, server, "site")
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
