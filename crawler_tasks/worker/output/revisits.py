"""Which WARC record a recrawl's response becomes: a ``revisit`` record, which keeps the
response's headers and points at the earlier capture of the same payload, or a full response.

A revisit is written in two cases (WARC 1.1, 6.7):

* ``server-not-modified``: the server answered 304 to the validators of the previous run;
* ``identical-payload-digest``: a 2xx whose payload's SHA-1 equals the last full capture's.

The payload is what the response record holds (``Response.archived``): a gzip or deflate
body as received, so the digest compared is the one the earlier record carries (a revisit's
WARC-Payload-Digest is its original's). A page served compressed the same way twice is a
revisit; one whose server compresses it differently each time is written in full (safe: never
a revisit of other bytes). Captures kept before issue 32 hold the digest of the decoded body:
a compressed page's first run after it is written in full once, an identity page's still
matches. The crawl's own change detection (state/validators.py) hashes the decoded body.

Each points at the last *full* capture of the URL (its payload digest, WARC-Target-URI and
WARC-Date), kept in Redis by the schedule (state/captures.py), never read back from old WARC
files; a revisit does not replace it, so a page unchanged for ten runs still points at the run
that stored it. Anything else (a first visit, a change, a truncated body, a 304 or error with no
full capture to point at) is written in full, and a 2xx written in full (cut at the limit
too: a 304 confirms what the capture holds) becomes the URL's capture.

A 304's revisit carries the capture's HTTP status line and headers, kept with it, with the
304's own values of the headers RFC 9110 (15.4.5) has a 304 send in place of the 200's (Date,
ETag, Cache-Control, Expires, Vary, Content-Location) and Last-Modified: so that it replays as
the page it confirms. A replay tool (pywb's resolvingloader, wabac.js) answers a revisit with
the revisit's own status and headers over the original's payload, and a 3xx status with no
payload at all, as a redirect: a revisit holding the 304 itself replayed as an empty 304, and
the original's Content-Type and Content-Encoding, which the payload needs, are not in a 304.
Its profile stays server-not-modified: the payload was not seen again, the server vouched for
it, and the digest is the capture's by that word, not by a comparison (identical-payload-digest
says the bytes were compared). A capture kept before its head was has only a status line
``200 OK`` and no headers: pywb then takes the original record's status and headers whole.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from warcio.statusandheaders import StatusAndHeaders

from ...state.captures import Captures
from ...state.formats import Counter
from ...web.captures import Capture, now_micros, payload_digest, warc_date
from ...web.fetcher import Response
from .archive_fence import ArchiveFence
from .files import CrawlOutput
from .warc import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED, http_headers, truncation

#: The headers a 304 carries in place of the stored response's: RFC 9110 15.4.5's (what a
#: 200 would have sent) and Last-Modified, a validator the server may send again.
REFRESHED = frozenset(
    ("date", "etag", "cache-control", "expires", "vary", "content-location", "last-modified")
)


@dataclass(frozen=True)
class Written:
    record_id: str
    #: The revisit profile written; None for a full response.
    profile: str | None = None
    #: Payload bytes a revisit did not store again.
    saved: int = 0

    def counters(self) -> dict[str, int]:
        if self.profile is None:
            return {}
        return {Counter.REVISIT_RECORDS.value: 1, Counter.REVISIT_BYTES_SAVED.value: self.saved}


def write_capture(
    out: CrawlOutput,
    captures: Captures,
    response: Response,
    request_headers: list[tuple[str, str]],
    fence: ArchiveFence | None = None,
) -> Written:
    """The records of ``response`` (fetched as ``response.url``) in a schedule's run."""
    previous = captures.get(response.url)
    payload, coded = response.archived, response.coded
    digest = payload_digest(payload)
    profile = _revisit_profile(response, digest, previous)
    if previous is not None and profile is not None:
        if profile == REVISIT_NOT_MODIFIED:
            http = not_modified_head(previous, response.raw_headers, response.http_version)
        else:
            http = http_headers(
                str(response.status), response.raw_headers, len(payload),
                response.http_version, coded,
            )  # fmt: skip
        rid = out.revisit(
            response.final_url,
            profile,
            (previous.digest, previous.uri, previous.date),
            http,
            request_headers,
            ip=response.ip,
            fence=fence,
        )
        return Written(rid, profile, previous.length)
    micros = now_micros(time.time())
    rid = out.warc(
        response.final_url,
        response.status,
        "",
        response.raw_headers,
        payload,
        request_headers,
        http_version=response.http_version,
        ip=response.ip,
        warc_headers={
            "WARC-Date": warc_date(micros),
            "WARC-Payload-Digest": digest,
            **truncation(response.truncated),
        },
        fence=fence,
        coded=coded,
    )
    if 200 <= response.status < 300:
        # The head as out.warc wrote it (the same call), for a 304's revisit of this capture.
        http = http_headers(
            str(response.status), response.raw_headers, len(payload), response.http_version, coded
        )
        head = http.to_bytes().rstrip(b"\r\n")
        capture = Capture(digest, micros, response.final_url, len(payload), head)
        captures.put(response.url, capture)
    return Written(rid)


def not_modified_head(
    capture: Capture, headers: list[tuple[str, str]], http_version: str
) -> StatusAndHeaders:
    """The HTTP head of a 304's revisit of ``capture``: its status line and headers, those of
    :data:`REFRESHED` the 304 sent (``headers``) replaced by the 304's."""
    if not capture.http:
        return StatusAndHeaders("200 OK", [], protocol=http_version)
    lines = capture.http.decode("utf-8", "replace").split("\r\n")
    protocol, _, status = lines[0].partition(" ")
    fresh = [(k, v) for k, v in headers if k.lower() in REFRESHED]
    names = {k.lower() for k, _ in fresh}
    stored = [line.partition(":") for line in lines[1:]]
    kept = [(k, v.strip()) for k, _, v in stored if k.lower() not in names]
    return StatusAndHeaders(status, kept + fresh, protocol=protocol)


def _revisit_profile(response: Response, digest: str, previous: Capture | None) -> str | None:
    if previous is None:
        return None
    if response.status == 304:
        return REVISIT_NOT_MODIFIED
    if _complete_2xx(response) and digest == previous.digest:
        return REVISIT_IDENTICAL
    return None


def _complete_2xx(response: Response) -> bool:
    return 200 <= response.status < 300 and not response.truncated
