"""What an ``output`` names (state/objects/base.py's place) and the local object store."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler_tasks.errors import ConfigError, ObjectMissing, StoreUnavailable
from crawler_tasks.state import objects
from crawler_tasks.state.objects.local import LocalStore


@pytest.mark.parametrize(
    "given, kept",
    [
        ("s3://crawl/docs", "s3://crawl/docs"),
        ("s3://crawl/docs/", "s3://crawl/docs"),
        ("s3://crawl", "s3://crawl"),
        ("s3://my.bucket-2/a/b/c/", "s3://my.bucket-2/a/b/c"),
    ],
)
def test_an_s3_output_is_kept_as_a_url(given: str, kept: str) -> None:
    assert objects.place(given) == kept
    assert objects.is_url(kept)


@pytest.mark.parametrize(
    "given, says",
    [
        ("gs://bucket/x", "gs:// is not a place the crawler writes to"),
        ("hdfs://namenode/crawls", "hdfs:// is not a place"),
        ("s4://bucket/x", "s4:// is not a place"),
        ("https://bucket.example/x", "https:// is not a place"),
        ("s3:/crawl/docs", "write it as s3://BUCKET/PREFIX"),
        ("S3://crawl/docs", "write it as s3://BUCKET/PREFIX"),
        ("s3://Crawl_Bucket/x", "not a valid S3 bucket name"),
        ("s3:///x", "not a valid S3 bucket name"),
    ],
)
def test_an_output_of_another_scheme_or_a_typo_is_refused(given: str, says: str) -> None:
    with pytest.raises(ConfigError, match="output .*" + says.replace("/", ".")):
        objects.place(given)
    assert objects.looks_like_url(given)


def test_a_local_output_is_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert objects.place("data/x") == str(tmp_path / "data" / "x")
    assert not objects.looks_like_url("data/x") and not objects.is_url("data/x")
    # A colon in a file name is still a path: no "scheme:/" at its start.
    assert objects.place("run:1") == str(tmp_path / "run:1")


def test_the_local_root_of_an_s3_output_is_the_staging_directory() -> None:
    assert objects.local_root("s3://b-1/p", "/stage") == "/stage"
    assert objects.local_root("/shared/out", "/stage") == "/shared/out"
    assert objects.local_root("", "/stage") == "/stage"


def test_a_local_store_keeps_lists_and_deletes_objects(tmp_path: Path) -> None:
    store = objects.store_for(str(tmp_path / "root"))
    assert isinstance(store, LocalStore)
    assert list(store.list()) == []
    store.put("c1/pages-a.jsonl", b"one\n")
    src = tmp_path / "src.warc.gz"
    src.write_bytes(b"\x1f\x8b" + b"w" * 1000)
    store.child("c1").put_file("crawl-a.warc.gz", src)
    assert list(store.list()) == ["c1/crawl-a.warc.gz", "c1/pages-a.jsonl"]
    assert list(store.list("c1/p")) == ["c1/pages-a.jsonl"]
    assert store.get("c1/pages-a.jsonl") == b"one\n"
    assert store.size("c1/crawl-a.warc.gz") == 1002
    with store.open("c1/crawl-a.warc.gz") as f:
        assert f.read() == src.read_bytes()
    store.delete("c1/pages-a.jsonl")
    store.delete("c1/pages-a.jsonl")  # twice: nothing to say
    assert not store.exists("c1/pages-a.jsonl") and store.exists("c1/crawl-a.warc.gz")
    with pytest.raises(ObjectMissing):
        store.get("c1/pages-a.jsonl")
    with pytest.raises(ObjectMissing):
        store.size("nothing")


def test_a_local_store_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    store = LocalStore(tmp_path / "file" / "below")
    with pytest.raises(StoreUnavailable, match="cannot write"):
        store.check()
    with pytest.raises(StoreUnavailable):
        store.put("a", b"x")
