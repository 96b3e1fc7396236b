"""How WARC records are built (issue 32). warcio's writer asked the kernel for the host's name
on every instance and for 16 random bytes on every record id, and fed its digests 16 KB at a
time: each a call that lets a fetch process's GIL go to another thread. The records are the
bytes warcio's own writer makes, and the ids the same kind as before: version-4 UUIDs,
distinct, and distinct in a forked child too."""

from __future__ import annotations

import io
import multiprocessing
import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import warcio.warcwriter
from warcio.archiveiterator import ArchiveIterator
from warcio.recordbuilder import RecordBuilder

from crawler_tasks.worker.output import warc
from crawler_tasks.worker.output.warc import http_headers, record_bytes, uuid4_hex, with_payload


def test_ids_are_version_4_uuids_and_distinct() -> None:
    ids = [uuid4_hex() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for h in ids[:2_000]:
        u = uuid.UUID(hex=h)
        assert (u.version, u.variant, u.hex) == (4, uuid.RFC_4122, h)


def _child_ids(q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    q.put([uuid4_hex() for _ in range(3)])


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    """Celery's prefork pool forks its children: one generator state copied into two processes
    would give both the same ids, and the page records' ids decide what is written once."""
    uuid4_hex()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_child_ids, args=(q,))
    child.start()
    theirs = q.get(timeout=30)
    child.join(30)
    mine = [uuid4_hex() for _ in range(3)]
    assert not set(theirs) & set(mine)


def test_records_are_built_without_asking_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> str:
        raise AssertionError("gethostname() called for a record")

    monkeypatch.setattr(warcio.warcwriter, "gethostname", refuse)
    head = http_headers("200 OK", [("Content-Type", "text/html")], 5, "HTTP/1.1")
    records = [with_payload("http://a.test/p", "response", b"hello", http_headers=head)]
    fields = b"via: a test\r\n"
    records.append(
        with_payload(
            "http://a.test/m", "metadata", fields, warc_content_type="application/warc-fields"
        )
    )
    data = b"".join(record_bytes(r, 1) for r in records)
    read, payloads = [], []
    for r in ArchiveIterator(io.BytesIO(data)):  # a payload is read while its record is current
        read.append(r)
        payloads.append(r.content_stream().read())
    assert [r.rec_type for r in read] == ["response", "metadata"]
    assert payloads == [b"hello", fields]
    ids = [r.rec_headers.get_header("WARC-Record-ID") for r in read]
    for rid in ids:
        assert rid.startswith("<urn:uuid:") and rid.endswith(">")
        assert uuid.UUID(rid[10:-1]).version == 4
    assert len(set(ids)) == 2
    assert read[0].rec_headers.get_header("WARC-Payload-Digest").startswith("sha1:")


def _write_all(build: Callable[[], Any], out: io.BytesIO) -> bytes:
    """A response (its body longer than warcio's 16 KB digest pieces), a conversion, a
    metadata and a revisit record, each built and written by a writer ``build`` makes."""
    body = random.Random(1).randbytes(5_000) + b"y" * 70_000
    head = http_headers("200 OK", [("Content-Type", "text/html")], len(body), "HTTP/1.1")
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("response", {"http_headers": head, "warc_headers_dict": {"WARC-IP-Address": "10.0.0.1"}}),
        ("conversion", {"warc_content_type": "text/html; charset=utf-8"}),
        ("metadata", {"warc_content_type": "application/warc-fields"}),
    ]
    for kind, kwargs in kinds:
        payload = io.BytesIO(body)
        record = build().create_warc_record(
            "https://a.test/", kind, payload=payload, length=len(body), **kwargs
        )
        build().write_record(record)
    not_modified = http_headers("304 Not Modified", [("ETag", '"a"')], None, "HTTP/1.1")
    revisit = build().create_revisit_record(
        "https://a.test/", "sha1:AAAA", "https://a.test/", "2026-01-01T00:00:00Z",
        http_headers=not_modified,
    )  # fmt: skip
    build().write_record(revisit)
    return out.getvalue()


def test_records_are_the_bytes_warcios_own_writer_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    def fixed_date(*args: Any, **kwargs: Any) -> str:
        return "2026-11-28T00:00:00.000000Z"

    def fixed_id(*args: Any) -> str:
        return "<urn:uuid:00000000-0000-4000-8000-000000000000>"

    monkeypatch.setattr(RecordBuilder, "_make_warc_date", classmethod(fixed_date))
    for cls in (RecordBuilder, warc._Writer):
        monkeypatch.setattr(cls, "_make_warc_id", classmethod(fixed_id))
    ours, theirs = io.BytesIO(), io.BytesIO()
    mine = _write_all(lambda: warc.writer(ours), ours)
    warcios = _write_all(
        lambda: warcio.warcwriter.WARCWriter(theirs, gzip=False, warc_version="1.1"), theirs
    )
    assert mine == warcios
    assert mine.count(b"WARC-Block-Digest: sha1:") == 4 and len(mine) > 225_000
