"""The output writer's WARC gzip level is applied and readable. The writer on a full or read-only
disk: tests/integration/test_output_disk.py."""

from __future__ import annotations

from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.worker.output.files import CrawlOutput


def test_warc_gzip_level_is_applied_and_readable(tmp_path: Path) -> None:
    """Settings.warc_gzip_level reaches each record's gzip member: level 1 is larger than 9
    on a compressible page, and both read back as the same records."""
    body = b"<html><body>" + b"".join(b"<p>line %d of a page</p>" % i for i in range(3000))
    sizes, urls = {}, {}
    for level in (1, 9):
        out = CrawlOutput(tmp_path / str(level), "h", gzip_level=level)
        out.warc("http://a.test/", 200, "OK", [("Content-Type", "text/html")], body, [])
        (path,) = (tmp_path / str(level)).glob("*.warc.gz")
        sizes[level] = path.stat().st_size
        with path.open("rb") as f:
            urls[level] = [
                (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
                for r in ArchiveIterator(f)
            ]
    assert sizes[1] > sizes[9], sizes
    # warcinfo, request, response
    assert urls[1] == urls[9] and urls[1][0][0] == "warcinfo" and urls[1][2][2] == body
