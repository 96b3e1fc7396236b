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
import sys
import zlib
from random import getrandbits
from typing import Any

from warcio.recordbuilder import RecordBuilder
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from ...web.captures import payload_digest

# Headers that describe the bytes on the wire, not the payload kept in the WARC record: the
# transfer coding is always removed (urllib3 dechunks), the content coding when the payload
# kept is the decoded body. A replay tool takes the record's headers for the payload's, so
# these are renamed X-Orig-* (as browsertrix does: what the server said stays readable, and no
# player undoes a coding the payload no longer has) and Content-Length is the payload's.
_WIRE_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}
_CODED_HEADERS = {"transfer-encoding", "content-length"}
ORIG = "X-Orig-"


def http_headers(
    status_line: str,
    headers: list[tuple[str, str]],
    length: int | None,
    http_version: str,
    coded: bool = False,
) -> StatusAndHeaders:
    """A response's HTTP headers as a record keeps them: those of the wire (encoding, length)
    renamed X-Orig-*, the payload's Content-Length (``length``; None: no body, a 304) added; a
    Content-Length that already says it is kept as it is. ``coded``: the payload is the body
    as received, and its Content-Encoding stays."""
    wire = _CODED_HEADERS if coded else _WIRE_HEADERS
    said = str(length) if length is not None else None
    kept = []
    for name, value in headers:
        lower = name.lower()
        if lower == "content-length" and value.strip() == said:
            said = None  # the server's own header says the payload's length: kept as sent
        if lower in wire and not (lower == "content-length" and said is None):
            name = ORIG + name
        kept.append((name, value))
    if said is not None:
        kept.append(("Content-Length", said))
    return StatusAndHeaders(status_line.strip(), kept, protocol=http_version)


def truncation(truncated: bool) -> dict[str, str]:
    """The WARC header of a response cut at the crawl's ``max_body_bytes`` (WARC 1.1, 5.13),
    kept decoded: the bytes received past the cut were not kept."""
    return {"WARC-Truncated": "length"} if truncated else {}


#: WARC-Profile of a revisit record (WARC 1.1, 6.7.2 and 6.7.3).
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


# A version-4 UUID's fixed bits (RFC 9562 5.4): the version (4) in bits 76-79, the variant
# (0b10) in bits 62-63.
_UUID_FIXED = (0xF << 76) | (0x3 << 62)
_UUID_V4 = (0x4 << 76) | (0x2 << 62)


def uuid4_hex() -> str:
    """A random version-4 UUID's 32 hex digits, from the process's Mersenne Twister (seeded
    from the kernel, and again in a forked child: CPython's ``random`` does it): an id, not a
    secret. ``uuid.uuid4()`` asks the kernel for 16 bytes, a system call that lets the GIL go
    to another of the process's threads, three times a page (issue 32)."""
    return f"{getrandbits(128) & ~_UUID_FIXED | _UUID_V4:032x}"


class _Writer(WARCWriter):
    """warcio's writer without its ``gethostname()`` per instance (a system call that lets the
    GIL go, four times a page; no record of ours names the host) and with its record ids from
    :func:`uuid4_hex`."""

    def __init__(self, out: io.BytesIO) -> None:  # not BaseWARCWriter's
        RecordBuilder.__init__(self, warc_version="1.1")
        self.out, self.gzip = out, False

    @classmethod
    def _make_warc_id(cls) -> str:
        h = uuid4_hex()
        return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"

    def ensure_digest(
        self, record: ArcWarcRecord, block: bool = True, payload: bool = True
    ) -> None:
        """warcio's digests, each in one update of the payload in memory: warcio feeds both
        16 KB at a time, and hashlib lets the GIL go for each piece (~6 a page of 33 KB)."""
        stream = record.raw_stream
        if record.length is None or not isinstance(stream, io.BytesIO):
            return super().ensure_digest(record, block, payload)  # type: ignore[no-any-return]
        headers = record.rec_headers
        payload = payload and not headers.get_header("WARC-Payload-Digest")
        payload = payload and record.rec_type not in self.NO_PAYLOAD_DIGEST_TYPES
        block = block and not headers.get_header("WARC-Block-Digest")
        with stream.getbuffer() as whole, whole[stream.tell() :] as data:
            if payload:
                headers.add_header("WARC-Payload-Digest", payload_digest(data))
            if block:
                http = record.http_headers
                if http is not None and not http.headers_buff:
                    http.compute_headers_buffer(self.header_filter)
                head = http.headers_buff if http is not None else b""
                headers.add_header("WARC-Block-Digest", payload_digest(data, head))


def writer(out: io.BytesIO | None = None) -> WARCWriter:
    return _Writer(out or io.BytesIO())


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
    return gzip_member(buf.getbuffer(), level)


def gzip_member(data: bytes | memoryview, level: int) -> bytes:
    """``data`` as one gzip member. In one call where Python has it (3.11): zlib lets the GIL
    go in each call, and each is a hand-off to another of the process's threads."""
    if sys.version_info >= (3, 11):
        return zlib.compress(data, level, wbits=zlib.MAX_WBITS + 16)
    gz = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS + 16)
    return gz.compress(data) + gz.flush()


def request_target(url: str) -> str:
    rest = url.split("://", 1)[-1]
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"
