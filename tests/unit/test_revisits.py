"""Revisit records (issue 35), the capture index's packing: 32 bytes a capture, its date to the
microsecond. The revisits of a second run: tests/integration/test_revisits.py."""

from __future__ import annotations

from crawler_tasks.web.captures import Capture, payload_digest, warc_date


def test_a_capture_packs_in_32_bytes_and_keeps_its_date_to_the_microsecond():
    url = "http://a.test/page"
    capture = Capture(payload_digest(b"x"), 1_795_000_000_123_456, url, 1)
    packed = capture.pack(url)
    assert len(packed) == 32
    assert Capture.unpack(url, packed) == capture
    assert capture.date == "2026-11-18T11:06:40.123456Z" == warc_date(capture.micros)
    moved = Capture(capture.digest, capture.micros, "http://a.test/moved", 1)
    assert Capture.unpack(url, moved.pack(url)) == moved  # a redirect's target is kept
