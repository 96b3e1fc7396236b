"""Revisit records (issue 35), the capture index's packing: 32 bytes a capture, its date to the
microsecond, its HTTP head deflated; a 304's revisit head (issue 48); the wire's headers of a
decoded body renamed. The revisits of a second run: tests/integration/test_revisits.py."""

from __future__ import annotations

from crawler_tasks.web.captures import Capture, payload_digest, warc_date
from crawler_tasks.worker.output.revisits import not_modified_head
from crawler_tasks.worker.output.warc import http_headers


def test_a_capture_packs_in_32_bytes_and_keeps_its_date_to_the_microsecond():
    url = "http://a.test/page"
    capture = Capture(payload_digest(b"x"), 1_795_000_000_123_456, url, 1)
    packed = capture.pack(url)
    assert len(packed) == 32
    assert Capture.unpack(url, packed) == capture
    assert capture.date == "2026-11-18T11:06:40.123456Z" == warc_date(capture.micros)
    moved = Capture(capture.digest, capture.micros, "http://a.test/moved", 1)
    assert Capture.unpack(url, moved.pack(url)) == moved  # a redirect's target is kept


HEAD = (
    b"HTTP/1.1 200\r\nServer: nginx\r\nDate: Sat, 28 Nov 2026 10:00:00 GMT\r\n"
    b'Content-Type: text/html; charset=utf-8\r\nETag: "5f3a-1b2c"\r\n'
    b"Last-Modified: Fri, 27 Nov 2026 08:00:00 GMT\r\nCache-Control: max-age=600\r\n"
    b"Vary: Accept-Encoding\r\nContent-Encoding: gzip\r\nX-Orig-Transfer-Encoding: chunked\r\n"
    b"Content-Length: 5120"
)


def test_a_capture_keeps_its_http_head_compactly_and_old_captures_still_read():
    url = "http://a.test/page"
    capture = Capture(payload_digest(b"x"), 1_795_000_000_123_456, url, 5120, HEAD)
    packed = capture.pack(url)
    assert Capture.unpack(url, packed) == capture
    assert len(packed) < 32 + len(HEAD) * 0.6, len(packed)  # deflated with the dictionary
    moved = Capture(capture.digest, capture.micros, "http://a.test/moved", 1, HEAD)
    assert Capture.unpack(url, moved.pack(url)) == moved
    old = Capture(capture.digest, capture.micros, "http://a.test/moved", 1)
    assert Capture.unpack(url, old.pack(url)).http == b""  # packed before heads were kept


def test_a_304_revisit_carries_the_captures_head_with_the_304s_validators():
    capture = Capture(payload_digest(b"x"), 1_795_000_000_123_456, "http://a.test/", 5120, HEAD)
    not_modified = [
        ("Date", "Sun, 29 Nov 2026 10:00:00 GMT"),
        ("ETag", '"5f3a-1b2d"'),
        ("Cache-Control", "max-age=60"),
        ("Connection", "close"),  # not one a 304 stands in for: the capture's set is kept
    ]
    http = not_modified_head(capture, not_modified, "HTTP/1.1")
    assert http.protocol == "HTTP/1.1" and http.get_statuscode() == "200"
    got = dict(http.headers)
    assert got["Date"] == "Sun, 29 Nov 2026 10:00:00 GMT" and got["ETag"] == '"5f3a-1b2d"'
    assert got["Cache-Control"] == "max-age=60" and "Connection" not in got
    # What the payload needs to be read is the capture's.
    assert got["Content-Type"] == "text/html; charset=utf-8" and got["Content-Encoding"] == "gzip"
    assert got["Content-Length"] == "5120"
    assert got["Last-Modified"] == "Fri, 27 Nov 2026 08:00:00 GMT"  # the 304 sent none
    bare = not_modified_head(Capture(capture.digest, 1, "http://a.test/"), not_modified, "HTTP/1.1")
    assert bare.get_statuscode() == "200" and bare.headers == []  # pywb: the original's, whole


def test_wire_headers_of_a_decoded_body_are_renamed_not_kept_as_if_it_were_coded():
    wire = [
        ("Content-Type", "text/html"),
        ("Content-Encoding", "br"),
        ("Transfer-Encoding", "chunked"),
    ]
    decoded = http_headers("200 OK", wire, 900, "HTTP/1.1", coded=False)
    assert decoded.headers == [
        ("Content-Type", "text/html"),
        ("X-Orig-Content-Encoding", "br"),
        ("X-Orig-Transfer-Encoding", "chunked"),
        ("Content-Length", "900"),
    ]
    gzip_wire = [("Content-Encoding", "gzip"), ("Content-Length", "300")]
    coded = http_headers("200 OK", gzip_wire, 300, "HTTP/1.1", coded=True)
    assert coded.headers == gzip_wire  # as sent: its length is the payload's
    cut = http_headers("200 OK", [("Content-Length", "9000")], 100, "HTTP/1.1")
    assert cut.headers == [("X-Orig-Content-Length", "9000"), ("Content-Length", "100")]
