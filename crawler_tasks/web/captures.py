"""A URL's last full WARC capture, as a recrawl needs it to write a ``revisit`` record instead
of the same payload again (WARC 1.1, section 6.7): the payload digest, the WARC-Date and the
WARC-Target-URI of the response record that holds the payload.

Packed for Redis in 32 bytes plus the target URI when it is not the URL asked for (a
redirect): the raw 20-byte SHA-1, the date in microseconds since the epoch and the payload's length (what a
revisit of it saves). The date is kept
exactly as written (``warc_date`` is the only way a WARC-Date is made from it), so
WARC-Refers-To-Date equals the earlier record's WARC-Date to the microsecond, which is what a
replay index (pywb, cdxj-indexer) matches a revisit against.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)
_HEAD = struct.Struct(">20sQI")
_SHA1 = "sha1:"


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

    @property
    def date(self) -> str:
        return warc_date(self.micros)

    def pack(self, url: str) -> bytes:
        raw = base64.b32decode(self.digest.removeprefix(_SHA1))
        tail = b"" if self.uri == url else self.uri.encode("utf-8", "surrogateescape")
        return _HEAD.pack(raw, self.micros, min(self.length, 0xFFFFFFFF)) + tail

    @classmethod
    def unpack(cls, url: str, packed: bytes) -> Capture:
        raw, micros, length = _HEAD.unpack_from(packed)
        tail = packed[_HEAD.size :]
        uri = tail.decode("utf-8", "surrogateescape") if tail else url
        return cls(_SHA1 + base32(raw), micros, uri, length)
