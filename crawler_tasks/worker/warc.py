"""How the crawl's WARC records are built (warcio), apart from where they are appended
(output.py): WARC/1.1 records, the warcinfo record a file begins with, the HTTP headers a record
keeps, one gzip member per record.

A response record holds the body as it came over the wire when it was content-coded (gzip,
deflate: web/body.py KEPT_CODINGS; WARC 1.1's payload is the entity with its content coding,
after transfer decoding; what Heritrix, wget and warcprox write), its Content-Encoding kept, in a
stored gzip member (deflating compressed bytes again costs CPU for nothing); warcio's
``content_stream()`` decodes it. Other bodies are kept decoded, deflated at the crawl's
level."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import zlib
from typing import Any

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

# Headers that describe the bytes on the wire, not the payload kept in the WARC record: the
# transfer coding is always removed (urllib3 dechunks), the content coding when the payload
# kept is the decoded body.
_WIRE_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}
_CODED_HEADERS = {"transfer-encoding", "content-length"}


def http_headers(
    status_line: str,
    headers: list[tuple[str, str]],
    length: int | None,
    http_version: str,
    coded: bool = False,
) -> StatusAndHeaders:
    """A response's HTTP headers as a record keeps them: those of the wire (encoding, length)
    replaced by the payload's Content-Length (``length``; None: no body, a 304). ``coded``:
    the payload is the body as received, and its Content-Encoding stays."""
    dropped = _CODED_HEADERS if coded else _WIRE_HEADERS
    kept = [(k, v) for k, v in headers if k.lower() not in dropped]
    if length is not None:
        kept.append(("Content-Length", str(length)))
    return StatusAndHeaders(status_line.strip(), kept, protocol=http_version)


def truncation(truncated: bool) -> dict[str, str]:
    """The WARC header of a response cut at the crawl's ``max_body_bytes`` (WARC 1.1, 5.13),
    kept decoded: the bytes received past the cut were not kept."""
    return {"WARC-Truncated": "length"} if truncated else {}


#: WARC-Profile of a revisit record (WARC 1.1, 6.7.2 and 6.7.3).
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def writer(out: io.BytesIO | None = None) -> WARCWriter:
    return WARCWriter(out or io.BytesIO(), gzip=False, warc_version="1.1")


def with_payload(url: str, kind: str, payload: bytes, **kwargs: Any) -> ArcWarcRecord:
    """A record of ``payload`` (with its length given: warcio, told none, copies the payload
    into a temporary file twice and digests it three times, and drops a WARC-Payload-Digest
    given to it to compute it again, issue 32)."""
    return writer().create_warc_record(
        url, kind, payload=io.BytesIO(payload), length=len(payload), **kwargs
    )


def warcinfo(filename: str, info: dict[str, str]) -> ArcWarcRecord:
    return writer().create_warcinfo_record(filename, info)


def warcinfo_fields(crawl_id: str, options_json: str) -> dict[str, str]:
    """What a crawl's WARC files say of it in their warcinfo record: the software, the crawl
    and a SHA-256 of its options (all but the crawl's id and start time, so that the runs of
    a schedule with the same options show the same digest)."""
    options = {
        k: v for k, v in json.loads(options_json).items() if k not in ("crawl_id", "started_at")
    }
    canonical = json.dumps(options, sort_keys=True, separators=(",", ":")).encode()
    return {
        "software": f"crawler-tasks/{importlib.metadata.version('crawler-tasks')}",
        "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
        "isPartOf": crawl_id,
        "x-crawl-options-digest": "sha256:" + hashlib.sha256(canonical).hexdigest(),
    }


def record_bytes(record: ArcWarcRecord, level: int) -> bytes:
    """The record as one gzip member, deflated at ``level``; level 0 stores it (a CRC and a
    copy: what a record of already compressed bytes gets, issue 32)."""
    buf = io.BytesIO()
    writer(buf).write_record(record)
    gz = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS + 16)
    return gz.compress(buf.getbuffer()) + gz.flush()


def request_target(url: str) -> str:
    rest = url.split("://", 1)[-1]
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"
