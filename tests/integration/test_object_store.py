"""The S3 object store (state/objects/s3.py) against a real S3 API server (SeaweedFS,
tests/support/seaweed.py), and ``crawler crawl --output s3://...`` refusing what it cannot
write to, in one line and before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawler_tasks.errors import ObjectMissing, StoreUnavailable
from crawler_tasks.state import objects
from crawler_tasks.state.objects.s3 import S3Store
from tests.support.seaweed import READER_KEY, READER_SECRET, SECRET_KEY, Seaweed


def test_objects_are_put_read_listed_and_deleted(s3: str, tmp_path: Path) -> None:
    store = objects.store_for(s3)
    assert isinstance(store, S3Store) and store.url == s3
    store.check()
    assert list(store.list()) == []
    store.put("c1/pages-h-1-r-0.jsonl", b'{"url":"x"}\n')
    # Past s3transfer's part size (8 MiB): written in parts, read back whole.
    big = tmp_path / "big.warc.gz"
    big.write_bytes(os.urandom(9 * 1024 * 1024))
    store.child("c1").put_file("crawl-h-1-r-0.warc.gz", big)
    store.put("c2/summary.json", b"{}")
    assert list(store.list()) == [
        "c1/crawl-h-1-r-0.warc.gz",
        "c1/pages-h-1-r-0.jsonl",
        "c2/summary.json",
    ]
    assert list(store.child("c1").list("pages-")) == ["pages-h-1-r-0.jsonl"]
    assert store.size("c1/crawl-h-1-r-0.warc.gz") == big.stat().st_size
    with store.open("c1/crawl-h-1-r-0.warc.gz") as f:
        assert f.read() == big.read_bytes()
    assert store.get("c1/pages-h-1-r-0.jsonl") == b'{"url":"x"}\n'
    store.put("c2/summary.json", b'{"a":1}')  # replaced whole
    assert store.get("c2/summary.json") == b'{"a":1}'
    store.delete("c2/summary.json")
    assert not store.exists("c2/summary.json")
    with pytest.raises(ObjectMissing, match="no object c2/summary.json"):
        store.get("c2/summary.json")


def test_a_missing_bucket_and_refused_credentials_are_one_line_without_secrets(
    s3: str, seaweed: Seaweed, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.removeprefix("s3://").split("/")[0]
    with pytest.raises(StoreUnavailable, match="no bucket nosuch-bucket") as missing:
        S3Store("nosuch-bucket", "p", seaweed.client()).check()
    with pytest.raises(StoreUnavailable, match="access denied .*check the credentials") as denied:
        S3Store(bucket, "p", seaweed.client(secret="wrong")).check()
    # Keys that may read but not write: the write is refused in one line too.
    with pytest.raises(StoreUnavailable, match="access denied"):
        S3Store(bucket, "p", seaweed.client(READER_KEY, READER_SECRET)).put("x", b"x")
    for exc in (missing.value, denied.value):
        assert "\n" not in str(exc) and SECRET_KEY not in str(exc)


@pytest.mark.parametrize(
    "output, says",
    [
        ("s3://nosuch-bucket/crawls", "no bucket nosuch-bucket"),
        ("s3://{bucket}/crawls", "access denied to bucket {bucket}"),
        ("gs://{bucket}/crawls", "gs:// is not a place the crawler writes to"),
        ("s3:/{bucket}/crawls", "write it as s3://BUCKET/PREFIX"),
    ],
)
def test_crawl_refuses_an_output_it_cannot_write_before_anything_is_written(
    s3: str, seaweed: Seaweed, redis_url: str, tmp_path: Path, output: str, says: str
) -> None:
    bucket = s3.removeprefix("s3://").split("/")[0]
    output, says = output.format(bucket=bucket), says.format(bucket=bucket)
    secret = "wrong-" + SECRET_KEY if "access denied" in says else SECRET_KEY
    env = seaweed.env(AWS_SECRET_ACCESS_KEY=secret, CRAWLER_OUTPUT_DIR=str(tmp_path / "stage"))
    result = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl", "http://example.com/"]
        + ["--broker", redis_url, "--output", output, "--no-wait"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert says in line and secret not in line, line
    assert list(tmp_path.iterdir()) == []  # no "s3:" or "gs:" directory, no staging
    assert seaweed.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
