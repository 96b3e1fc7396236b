"""Reading one HTTP response: its body under hard limits, and the header values kept of it;
:class:`Response`, what :class:`.fetcher.Fetcher` returns.

The body is streamed and decoded in bounded steps and cut at a limit of *decoded* bytes (see
:func:`read_body`); a gzip or deflate body is kept as received too, for the WARC, which
archives what came over the wire (issue 32: no second deflate of compressed bytes). A
redirect's body is dropped (:func:`discard`). The redirect chain these responses belong to is
:class:`.fetcher.Fetcher`'s.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import requests
from urllib3.exceptions import DecodeError
from urllib3.response import ContentDecoder, DeflateDecoder, GzipDecoder, HTTPResponse

if TYPE_CHECKING:
    from .deadline import Deadline

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
#: Largest redirect body read to keep its connection alive; larger ones close the connection.
_DRAIN_LIMIT = 64 * 1024


#: The content codings whose bodies are kept as received, each with urllib3's decoder of it
#: (the same ``max_length`` bounds as its own reads): those warcio's ``content_stream()``
#: decodes when it reads the record back. Not ``x-gzip``, nor several codings in a row; nor
#: ``br``: warcio 1.8 sets an attribute on the decompressor that Google's ``brotli`` module
#: refuses (webrecorder/warcio#73: it expects brotlipy), so a br record would not read back.
KEPT_CODINGS: dict[str, Callable[[], ContentDecoder]] = {
    "gzip": GzipDecoder,
    "deflate": DeflateDecoder,
}


@dataclass
class Body:
    data: bytes  #: the decoded body, at most the limit
    #: The body as received (transfer coding removed, content coding kept), when it is kept
    #: beside ``data`` to be archived as it came; None: archive ``data``.
    wire: bytes | None
    truncated: bool  #: cut at the limit (decoded bytes)


@dataclass
class Response:
    url: str  #: the URL asked for
    final_url: str  #: the URL whose response this is (after the redirects followed)
    status: int
    #: Final response headers, keys lower-cased (``headers["content-type"]``); repeated headers
    #: joined with ", ". A plain dict, so a Response pickles and serialises to JSON.
    headers: dict[str, str]
    content_type: str | None  #: media type only, lower-case ("text/html")
    body: bytes  #: decoded body, at most ``max_body_bytes``
    truncated: bool  #: body cut at ``max_body_bytes`` (decoded size)
    redirects: list[tuple[int, str]]  #: (status, normalised target) per hop, in order
    elapsed: float  #: seconds, the whole call
    ip: str | None  #: the address the final response came from
    raw_headers: list[tuple[str, str]]  #: headers as received (original case), for WARC
    http_version: str  #: "HTTP/1.1"
    #: When ``follow`` stopped the chain: its reason; the response is then the redirect itself.
    stop_reason: str | None = None
    #: time.monotonic() when the first request of the chain was sent (None: not known)
    sent_at: float | None = None
    #: Seconds from sending the first request to its headers (never queueing: AutoThrottle).
    latency: float | None = None
    #: The body as received, its content coding (gzip, deflate) kept, when the WARC keeps
    #: it so (see :attr:`archived`); None: the WARC keeps ``body``, decoded.
    wire: bytes | None = None

    @property
    def archived(self) -> bytes:
        """The payload its WARC response record holds: as received when it was content-coded
        (WARC 1.1: the entity with its content coding, transfer coding removed), else the
        decoded body (identity, a coding not kept, a body cut at the limit)."""
        return self.body if self.wire is None else self.wire

    @property
    def coded(self) -> bool:
        """Whether :attr:`archived` is content-coded (its record keeps Content-Encoding)."""
        return self.wire is not None


def read_body(raw: HTTPResponse, limit: int, deadline: Deadline) -> Body:
    """At most ``limit`` decoded bytes of the body, and whether there was more.

    A body in one of :data:`KEPT_CODINGS` is read raw and decoded here, keeping the received
    bytes too (:func:`_read_coded`); any other (identity, several codings, one we cannot
    archive so that warcio reads it back) through urllib3's own decoding, as before.
    ``read(amt, decode_content=True)`` decompresses at most ``amt`` bytes per call (urllib3 2
    passes ``max_length`` to zlib), so a bomb never inflates past ``limit`` + one step. BytesIO
    hands its buffer over without a copy: the peak stays near ``limit``, not twice that.
    """
    coding = raw.headers.get("content-encoding", "").strip().lower()
    decoder = KEPT_CODINGS.get(coding)
    if decoder is not None:
        return _read_coded(raw, decoder(), limit, deadline)
    body = io.BytesIO()
    size = 0
    while True:
        chunk = raw.read(min(_CHUNK, limit + 1 - size), decode_content=True)
        deadline.check()  # a socket the deadline shut down reads as a clean end of body
        if not chunk:
            return Body(body.getvalue(), None, False)
        if size + len(chunk) > limit:
            body.write(chunk[: limit - size])
            return Body(body.getvalue(), None, True)
        body.write(chunk)
        size += len(chunk)


def _read_coded(raw: HTTPResponse, decoder: ContentDecoder, limit: int, deadline: Deadline) -> Body:
    """:func:`read_body` of a content-coded body, its received bytes kept: the same bounds
    (a step decodes at most one chunk's worth, however much the compressed bytes hold:
    urllib3's decoders take ``max_length``, and the tail they keep is decoded before more is
    read), the same errors (DecodeError). The received bytes are kept while they and the
    decoded body together stay within ``limit`` (so the peak is what it was); past that, or
    when the body is cut at the limit, the record is written decoded as before."""
    body, wire = io.BytesIO(), io.BytesIO()
    size = kept = 0
    while True:
        step = min(_CHUNK, limit + 1 - size)
        data = b""
        chunk = _decode(decoder, b"", step) if decoder.has_unconsumed_tail else b""
        if not chunk:
            data = raw.read(_CHUNK, decode_content=False)
            deadline.check()  # a socket the deadline shut down reads as a clean end of body
            if data:
                chunk = _decode(decoder, data, step)
            elif not decoder.has_unconsumed_tail:  # flush() would inflate a tail unbounded
                chunk = _decode(decoder, b"", step, last=True)
        kept += len(data)
        if kept + size + len(chunk) > limit:
            wire.close()  # the bytes given up at once: memory as before
        elif not wire.closed:
            wire.write(data)
        if size + len(chunk) > limit:
            body.write(chunk[: limit - size])
            return Body(body.getvalue(), None, True)
        body.write(chunk)
        size += len(chunk)
        if not data and not chunk:  # (an empty body, a 304's: nothing coded to keep)
            kept_wire = None if wire.closed or not kept else wire.getvalue()
            return Body(body.getvalue(), kept_wire, False)


def _decode(decoder: ContentDecoder, data: bytes, max_length: int, last: bool = False) -> bytes:
    try:
        out = decoder.decompress(data, max_length=max_length)
        return out + decoder.flush() if last and not _ended(decoder) else out
    except HTTPResponse.DECODER_ERROR_CLASSES as exc:  # as urllib3 itself raises it
        raise DecodeError(
            "Received response with content-encoding, but failed to decode it.", exc
        ) from exc


def _ended(decoder: ContentDecoder) -> bool:
    """The decoder's zlib stream is at its end, so its flush() would give nothing: a call that
    lets the GIL go to another of the process's threads, once a page (issue 32). False when
    urllib3's decoder does not show its zlib object: flushed as before."""
    return getattr(getattr(decoder, "_obj", None), "eof", False) is True


def discard(resp: requests.Response) -> None:
    """Drop a redirect's body, keeping its connection alive when the body is small."""
    raw = cast(HTTPResponse, resp.raw)
    length = content_length(raw)
    if length is not None and length <= _DRAIN_LIMIT:
        raw.drain_conn()  # bounded by Content-Length; releases the connection to the pool
    resp.close()


def redirect_location(resp: requests.Response) -> str | None:
    if resp.status_code not in REDIRECT_STATUSES:
        return None
    location = (resp.headers.get("location") or "").strip()
    if not location:
        return None
    try:  # http.client decodes headers as latin-1; servers send UTF-8 in practice
        return location.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return location


def content_length(raw: HTTPResponse) -> int | None:
    """The Content-Length header (the largest of repeated values), None when absent or bad."""
    values = raw.headers.getlist("content-length")
    try:
        return max(int(part) for v in values for part in v.split(",")) if values else None
    except ValueError:
        return None


def media_type(value: str | None) -> str | None:
    media = (value or "").partition(";")[0].strip().lower()
    return media or None


def http_version(raw: HTTPResponse) -> str:
    return raw.version_string if raw.version_string.startswith("HTTP/1") else "HTTP/1.1"
