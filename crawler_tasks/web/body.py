"""Reading one HTTP response: its body under hard limits, and the header values kept of it.

The body is streamed and decoded in bounded steps and cut at a limit of *decoded* bytes (see
:func:`read_body`); a redirect's body is dropped (:func:`discard`). The redirect chain these
responses belong to is :class:`.fetcher.Fetcher`'s.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, cast

import requests
from urllib3.response import HTTPResponse

if TYPE_CHECKING:
    from .pinning import Deadline

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
#: Largest redirect body read to keep its connection alive; larger ones close the connection.
_DRAIN_LIMIT = 64 * 1024


def read_body(raw: HTTPResponse, limit: int, deadline: Deadline) -> tuple[bytes, bool]:
    """At most ``limit`` decoded bytes of the body, and whether there was more.

    ``read(amt, decode_content=True)`` decompresses at most ``amt`` bytes per call (urllib3 2
    passes ``max_length`` to zlib), so a bomb never inflates past ``limit`` + one step. BytesIO
    hands its buffer over without a copy: the peak stays near ``limit``, not twice that.
    """
    body = io.BytesIO()
    size = 0
    while True:
        chunk = raw.read(min(_CHUNK, limit + 1 - size), decode_content=True)
        deadline.check()  # a socket the deadline shut down reads as a clean end of body
        if not chunk:
            return body.getvalue(), False
        if size + len(chunk) > limit:
            body.write(chunk[: limit - size])
            return body.getvalue(), True
        body.write(chunk)
        size += len(chunk)


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
