"""The WARC keeps a response as it came over the wire (issue 32): each content coding kept is
read back decoded by warcio. Through a real crawl: tests/integration/test_warc_wire.py."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.state.options import CrawlOptions
from crawler_tasks.web.fetcher import Fetcher
from crawler_tasks.web.profile import RequestProfile
from crawler_tasks.worker.output.outputs import Outputs
from crawler_tasks.worker.runtime.crawl_runtime import CrawlRuntime
from tests.support.sitegen import SiteServer


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
    outputs = Outputs()
    opts = CrawlOptions(crawl_id="c", seeds=("http://127.0.0.24/",), warc_non_html=False)
    profile = RequestProfile(allow_private=True, user_agent="t")
    place = ("c", str(tmp_path), None, "")
    runtime = CrawlRuntime(opts, profile, fetcher, None, outputs, place, lambda **_: None)  # type: ignore[arg-type]
    with SiteServer(address="127.0.0.24", extra_routes=routes) as site:
        response = fetcher.get(site.base_url + "/p", allow_private=True)
    fetcher.close()
    assert response.body == page and response.wire == body
    runtime.write_warc(response)
    outputs.close()
    found = responses(tmp_path / "c")[site.base_url + "/p"]
    assert found["http"]["Content-Encoding"] == name
    assert found["stored"] == body and found["decoded"] == page
    assert found["block"] & 0b110 == 0  # stored
