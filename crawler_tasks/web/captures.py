"""A URL's last full WARC capture, as a recrawl needs it to write a ``revisit`` record instead
of the same payload again (WARC 1.1, section 6.7): the payload digest, the WARC-Date and the
WARC-Target-URI of the response record that holds the payload, and that record's HTTP status
line and headers (a 304's revisit carries them, so that it replays as the page it confirms:
worker/output/revisits.py).

Packed for Redis in 32 bytes: the raw 20-byte SHA-1, the date in microseconds since the epoch
and the payload's length (what a revisit of it saves); then, for a capture with its HTTP head,
a marker, the target URI when it is not the URL asked for (a redirect) and the head deflated
with a dictionary of common header lines (:data:`_ZDICT`): about 120 bytes for a typical
page's dozen headers, against 300 as text. A capture kept before the head was (32 bytes, then
the URI or nothing) still reads, with no head. The date is kept exactly as written
(``warc_date`` is the only way a WARC-Date is made from it), so WARC-Refers-To-Date equals the
earlier record's WARC-Date to the microsecond, which is what a replay index (pywb,
cdxj-indexer) matches a revisit against.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)
_HEAD = struct.Struct(">20sQI")
_SHA1 = "sha1:"
#: Begins the tail of a capture packed with its HTTP head (a URI never begins with NUL), then the
#: packing's version: a new dictionary would be a new version, the old one kept to read.
_WITH_HEAD = b"\x00\x01"
_URI_LENGTH = struct.Struct(">I")
#: What the HTTP heads of captures share most, as zlib's preset dictionary (most frequent last):
#: a head of a dozen lines deflates to about 40 % of its size with it, 70 % without. Never
#: changed in place (packed heads are read with it): see ``_WITH_HEAD``.
_ZDICT = (
    b"X-Frame-Options: SAMEORIGIN\r\nX-Content-Type-Options: nosniff\r\nAccess-Control-Allow-Origin: *"
    b"\r\nStrict-Transport-Security: max-age=31536000; includeSubDomains\r\nAccept-Ranges: bytes"
    b"\r\nConnection: keep-alive\r\nServer: nginx\r\nVary: Accept-Encoding\r\nExpires: "
    b"\r\nCache-Control: max-age=0, no-cache, private, public\r\nContent-Encoding: gzip"
    b"\r\nLast-Modified: Mon, Tue, Wed, Thu, Fri, Sat, Sun, Jan Feb Mar Apr May Jun Jul Aug Sep"
    b' Oct Nov Dec 2026 GMT\r\nETag: W/"\r\nDate: \r\nContent-Length: '
    b"\r\nContent-Type: text/html; charset=utf-8\r\nHTTP/1.1 200 OK\r\n"
)


def payload_digest(body: bytes | memoryview, head: bytes = b"") -> str:
    """The WARC-Payload-Digest of ``body`` as warcio writes it (``sha1:`` + base32); with
    ``head`` (a record's HTTP headers) before it, its WARC-Block-Digest. One hashlib update
    of the body: each lets the GIL go (issue 32)."""
    digest = hashlib.sha1(head)
    digest.update(body)
    return _SHA1 + base32(digest.digest())


def base32(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii")


def warc_date(micros: int) -> str:
    """A WARC 1.1 date with microseconds (``2026-11-27T09:14:16.123456Z``)."""
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_micros(now: float) -> int:
    return int(round(now * 1_000_000))


@dataclass(frozen=True)
class Capture:
    digest: str  #: WARC-Payload-Digest, ``sha1:BASE32``
    micros: int  #: WARC-Date of the response record, microseconds since the epoch
    uri: str  #: WARC-Target-URI of the response record
    length: int = 0  #: payload bytes
    #: The response record's HTTP status line and headers as it keeps them, CRLF-separated
    #: (b"": not known, a capture kept before they were).
    http: bytes = b""

    @property
    def date(self) -> str:
        return warc_date(self.micros)

    def pack(self, url: str) -> bytes:
        raw = base64.b32decode(self.digest.removeprefix(_SHA1))
        head = _HEAD.pack(raw, self.micros, min(self.length, 0xFFFFFFFF))
        uri = b"" if self.uri == url else self.uri.encode("utf-8", "surrogateescape")
        if not self.http:
            return head + uri
        deflate = zlib.compressobj(9, zdict=_ZDICT)
        http = deflate.compress(self.http) + deflate.flush()
        return head + _WITH_HEAD + _URI_LENGTH.pack(len(uri)) + uri + http

    @classmethod
    def unpack(cls, url: str, packed: bytes) -> Capture:
        raw, micros, length = _HEAD.unpack_from(packed)
        tail, http = packed[_HEAD.size :], b""
        if tail.startswith(_WITH_HEAD):
            (size,) = _URI_LENGTH.unpack_from(tail, len(_WITH_HEAD))
            start = len(_WITH_HEAD) + _URI_LENGTH.size
            tail, deflated = tail[start : start + size], tail[start + size :]
            http = zlib.decompressobj(zdict=_ZDICT).decompress(deflated)
        uri = tail.decode("utf-8", "surrogateescape") if tail else url
        return cls(_SHA1 + base32(raw), micros, uri, length, http)
