"""The output writer on a real small filesystem (a tmpfs the test mounts; root only): a full
disk, a read-only one, a path below a file. Every failed record leaves each file as it was,
so that every WARC record stays readable and every pages line is whole, and writing goes on
where it stopped once there is room."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.errors import OutputUnavailable
from crawler_tasks.worker.output.files import CrawlOutput
from crawler_tasks.worker.output.read import read_pages
from tests.support.disks import tmpfs


def record(i: int) -> dict:  # type: ignore[type-arg]
    return {"url": f"http://a.test/{i}", "rid": f"r{i}", "outlinks": [f"http://a.test/{i + 1}"],
            "_items": [{"n": i, "pad": "x" * 300}]}  # fmt: skip


def warc(out: CrawlOutput, i: int) -> None:
    body = os.urandom(6000)  # incompressible: the disk fills in a few records
    out.warc(f"http://a.test/{i}", 200, "OK", [("Content-Type", "text/html")], body, [])


def fill(out: CrawlOutput, start: int) -> tuple[list[int], list[int]]:
    """Write records and WARC records until the disk refuses; which ones got in."""
    pages, warcs = [], []
    for i in range(start, start + 10_000):
        try:
            warc(out, i)
            warcs.append(i)
            out.final(record(i))
            pages.append(i)
        except OutputUnavailable as exc:
            assert str(exc).startswith("disk full at "), exc
            return pages, warcs
    raise AssertionError("the disk never filled")


def warc_urls(directory: Path) -> list[str]:
    urls = []
    for path in sorted(directory.glob("crawl-*.warc.gz")):
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):  # raises on a cut or joined record
                if rec.rec_type == "response":
                    urls.append(rec.rec_headers.get_header("WARC-Target-URI"))
    return urls


def test_a_full_disk_leaves_every_file_valid_and_writing_resumes(tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\0" * 64 * 1024)
        out = CrawlOutput(disk / "crawl", "host-1")
        pages, warcs = fill(out, 0)
        assert pages and warcs
        # Again, full: nothing half-written is added by the failures either.
        for i in range(5):
            with pytest.raises(OutputUnavailable):
                warc(out, 90_000 + i)
        filler.unlink()  # room again
        more_pages, more_warcs = fill(out, 20_000)
        out.close()
        records = list(read_pages(disk / "crawl"))
        assert [r["rid"] for r in records] == [f"r{i}" for i in pages + more_pages]
        items = list(read_pages(disk / "crawl", "items"))
        assert [line["rid"] for line in items] == [r["rid"] for r in records]
        assert warc_urls(disk / "crawl") == [f"http://a.test/{i}" for i in warcs + more_warcs]
        for path in (disk / "crawl").glob("*.jsonl"):
            assert path.read_bytes().endswith(b"\n")
            for line in path.read_text().splitlines():
                json.loads(line)


def test_an_unwritable_place_is_output_unavailable_not_a_bug(tmp_path):
    (tmp_path / "file").write_text("x")
    below_a_file = CrawlOutput(tmp_path / "file" / "crawl", "h")
    with pytest.raises(OutputUnavailable, match="^not a directory at "):
        below_a_file.final(record(1))
    with (
        tmpfs(tmp_path / "ro", "64k", "ro") as ro,
        pytest.raises(OutputUnavailable, match="^read-only file system at "),
    ):
        CrawlOutput(ro / "crawl", "h").final(record(1))
