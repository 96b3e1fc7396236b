"""The WARC keeps a response as it came over the wire (issue 32): a gzip body with its
Content-Encoding header and its bytes as sent, in a stored gzip member (no second deflate),
which warcio reads back decoded; a recrawl's revisit of it carries its original's payload
digest. A decompression bomb is still cut at the decoded limit, and archived decoded, as cut.
Through real crawls of a real local site (a worker in this process)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.state.options import CrawlOptions
from crawler_tasks.web.captures import payload_digest
from crawler_tasks.web.fetcher import Fetcher
from crawler_tasks.web.profile import RequestProfile
from crawler_tasks.worker.output.files import CrawlOutput
from crawler_tasks.worker.output.warc import REVISIT_IDENTICAL
from crawler_tasks.worker.runtime.crawl_runtime import CrawlRuntime
from tests.support.recrawl_site import run_schedule, unresolved, warcio_check
from tests.support.sitegen import SiteServer, running_sites

LIMIT = 256 * 1024  # the crawls' max_body_bytes
BOMB = gzip.compress(bytes(16 * 1024 * 1024), 9)  # 16 MiB of zeros in ~16 KB


def responses(directory: Path) -> dict[str, dict[str, Any]]:
    """Each response and revisit record by URI: WARC and HTTP headers, the payload as stored,
    as warcio's content_stream() decodes it, and the first byte of its gzip member's first
    deflate block."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("crawl-*.warc.gz")):
        data = path.read_bytes()
        for decode in (False, True):  # a record's payload is read once: twice over the file
            with open(path, "rb") as f:
                records = ArchiveIterator(f)
                for r in records:
                    if r.rec_type not in ("response", "revisit"):
                        continue
                    uri = r.rec_headers.get_header("WARC-Target-URI")
                    if decode:
                        found[uri]["decoded"] = r.content_stream().read()
                        continue
                    stored = r.raw_stream.read()
                    at = records.get_record_offset()  # (reads the record to its end)
                    found[uri] = {
                        "warc": dict(r.rec_headers.headers),
                        "http": dict(r.http_headers.headers),
                        "stored": stored,
                        "block": data[at + 10],  # after the member's 10-byte head
                    }
    return found


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


def _coded(coding: str, data: bytes) -> bytes:
    wbits = {"gzip": 31, "deflate": 15, "raw-deflate": -15}[coding]
    comp = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return comp.compress(data) + comp.flush()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
def test_each_coding_kept_is_read_back_decoded_by_warcio(tmp_path: Path, coding: str) -> None:
    """Fetched and archived as the crawl does (CrawlRuntime.write_warc), read back with
    warcio: the coding's bytes stored, its header kept, content_stream() the page."""
    page = b"<html><body>" + b"".join(b"<p>%d</p>" % i for i in range(20_000)) + b"</body></html>"
    body = _coded(coding, page)
    name = "deflate" if coding == "raw-deflate" else coding
    routes = {"/p": lambda h: h.send_body(200, body, headers={"Content-Encoding": name})}
    fetcher = Fetcher(
        user_agent="t", connect_timeout=10, read_timeout=10, total_timeout=15,
        max_body_bytes=1 << 20, max_redirects=0,
    )  # fmt: skip
    out = CrawlOutput(tmp_path, "t")
    opts = CrawlOptions(crawl_id="c", seeds=("http://127.0.0.24/",), warc_non_html=False)
    profile = RequestProfile(allow_private=True, user_agent="t")
    runtime = CrawlRuntime(opts, profile, fetcher, None, lambda: out)  # type: ignore[arg-type]
    with SiteServer(address="127.0.0.24", extra_routes=routes) as site:
        response = fetcher.get(site.base_url + "/p", allow_private=True)
    fetcher.close()
    assert response.body == page and response.wire == body
    runtime.write_warc(response)
    out.close()
    found = responses(tmp_path)[site.base_url + "/p"]
    assert found["http"]["Content-Encoding"] == name
    assert found["stored"] == body and found["decoded"] == page
    assert found["block"] & 0b110 == 0  # stored
