"""The WARC keeps a response as it came over the wire (issue 32): a gzip body with its
Content-Encoding header and its bytes as sent, in a stored gzip member (no second deflate),
which warcio reads back decoded; a recrawl's revisit of it carries its original's payload
digest. A decompression bomb is still cut at the decoded limit, and archived decoded, as cut.
Through real crawls of a real local site (a worker in this process)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from crawler_tasks.web.captures import payload_digest
from crawler_tasks.worker.output.warc import REVISIT_IDENTICAL
from tests.support.recrawl_site import run_schedule, unresolved, warcio_check
from tests.support.sitegen import running_sites
from tests.unit.test_warc_wire import responses

LIMIT = 256 * 1024  # the crawls' max_body_bytes
BOMB = gzip.compress(bytes(16 * 1024 * 1024), 9)  # 16 MiB of zeros in ~16 KB


@pytest.mark.timeout(300)
def test_a_gzip_response_is_archived_as_received_and_revisited_by_its_digest(
    settings, client, celery_worker
):
    routes = {"/bomb": lambda h: h.send_body(200, BOMB, headers={"Content-Encoding": "gzip"})}
    with running_sites(["127.0.0.23"], 20, 4, broken_ratio=0, cross_host_ratio=0) as (
        _,
        (server,),
    ):
        server.extra_routes.update(routes)
        server.gzip = lambda path: path != "/bomb"
        first = run_schedule(settings, server.base_url, "wire", "/", "/bomb", max_body_bytes=LIMIT)
        second = run_schedule(settings, server.base_url, "wire", "/", "/bomb", max_body_bytes=LIMIT)
    first_dir, second_dir = Path(first.output_dir), Path(second.output_dir)
    assert warcio_check(first_dir) == "" and warcio_check(second_dir) == ""
    records = responses(first_dir)
    bomb = records.pop(server.base_url + "/bomb")
    pages = records  # every other page, HTML or not, was sent gzip-compressed
    assert sum(r["http"]["Content-Type"].startswith("text/html") for r in pages.values()) >= 10
    for r in pages.values():
        assert r["http"]["Content-Encoding"] == "gzip"  # the header as received
        assert "Transfer-Encoding" not in r["http"]
        assert r["http"]["Content-Length"] == str(len(r["stored"]))
        assert r["decoded"] == gzip.decompress(r["stored"]) and r["decoded"]
        assert r["stored"] == gzip.compress(r["decoded"], 6, mtime=0)  # the bytes as sent
        assert r["warc"]["WARC-Payload-Digest"] == payload_digest(r["stored"])
        assert r["block"] & 0b110 == 0  # BTYPE 00: a stored block, not deflated again
    # The bomb: cut at the decoded limit, archived decoded, as cut, and said to be cut.
    assert "Content-Encoding" not in bomb["http"]
    assert bomb["stored"] == bytes(LIMIT) == bomb["decoded"]
    assert bomb["warc"]["WARC-Truncated"] == "length"
    assert bomb["block"] & 0b110 != 0  # deflated at the crawl's level
    # The second run: the same bytes again, revisits that carry their original's digest.
    again = responses(second_dir)
    revisits = {u: r for u, r in again.items() if r["warc"]["WARC-Type"] == "revisit"}
    assert set(revisits) == set(pages)
    for uri, r in revisits.items():
        assert r["warc"]["WARC-Profile"] == REVISIT_IDENTICAL
        assert r["warc"]["WARC-Payload-Digest"] == pages[uri]["warc"]["WARC-Payload-Digest"]
        assert r["http"]["Content-Encoding"] == "gzip" and r["stored"] == b""
    assert unresolved(first_dir, second_dir) == []
    assert again[server.base_url + "/bomb"]["warc"]["WARC-Type"] == "response"  # cut: in full
