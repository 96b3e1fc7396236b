"""The uploads of staged segments (worker/output/uploads.py) against a real S3 API server and a
real Redis: a dead process's segments are uploaded by the next process of the host, a live
one's are left to it, and a kill at every point of the upload path still leaves each segment
in exactly one object, recorded once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from crawler_tasks.state import objects
from crawler_tasks.state.finisher import Finisher
from crawler_tasks.state.formats import Status
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.segments import Segments
from crawler_tasks.worker.output import uploads
from crawler_tasks.worker.output.outputs import Outputs
from crawler_tasks.worker.output.segments import STORE_FILE, run_of
from crawler_tasks.worker.output.uploads import Uploads
from tests.support.seaweed import Seaweed

CRAWL = "c-uploads"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def stage(root: Path, s3: str, name: str, data: bytes) -> Path:
    directory = root / CRAWL
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STORE_FILE).write_text(s3 + "\n")
    (directory / name).write_bytes(data)
    return directory / name


def upload_round(root: Path, client: redis.Redis, s3: str) -> objects.ObjectStore:
    """One uploader's round over ``root`` (a process started on this host); the store."""
    up = Uploads(Outputs(), str(root), client, Keys(), 1 << 30, 3600.0)
    try:
        up.round()
    finally:
        up.stop(grace=0)
    return objects.store_for(s3).child(CRAWL)


def test_a_dead_processs_segments_are_uploaded_and_a_live_ones_left(
    s3: str, client: redis.Redis, tmp_path: Path
) -> None:
    host = socket.gethostname()
    dead = f"pages-{host}-{dead_pid()}-zz-000003.jsonl"
    parent = os.getppid()
    live = f"pages-{host}-{parent}-{run_of(parent)}-000000.jsonl"
    other_host = f"pages-elsewhere-{dead_pid()}-zz-000001.jsonl"
    for name in (dead, live, other_host):
        stage(tmp_path, s3, name, b'{"url":"u","rid":"r"}\n')
    store = upload_round(tmp_path, client, s3)
    assert list(store.list()) == [dead]
    left = sorted(p.name for p in (tmp_path / CRAWL).iterdir())
    assert left == sorted([STORE_FILE, live, other_host])
    assert Segments(client, Keys(), CRAWL).uploaded_names() == {dead: 22}


_KILLED = """
import sys, redis
from crawler_tasks.state.keys import Keys
from crawler_tasks.worker.output.outputs import Outputs
from crawler_tasks.worker.output.uploads import Uploads
up = Uploads(Outputs(), sys.argv[1], redis.Redis.from_url(sys.argv[2]), Keys(), 1 << 30, 3600.0)
up.round()
print("not killed")
"""


@pytest.mark.parametrize("point", ["before_upload", "after_upload", "after_upload_noted"])
def test_a_kill_anywhere_on_the_upload_path_leaves_one_object(
    s3: str, seaweed: Seaweed, client: redis.Redis, redis_url: str, tmp_path: Path, point: str
) -> None:
    name = f"crawl-{socket.gethostname()}-{dead_pid()}-zz-000007.warc.gz"
    data = os.urandom(300_000)
    path = stage(tmp_path, s3, name, data)
    env = {**os.environ, **seaweed.env(), "CRAWLER_FAULT_POINT": point}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED, str(tmp_path), redis_url],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr  # SIGKILL at the point
    assert path.exists()  # still staged: the next process of the host sends it again
    store = upload_round(tmp_path, client, s3)
    assert list(store.list()) == [name] and store.get(name) == data
    assert not path.exists()
    segments = Segments(client, Keys(), CRAWL)
    assert segments.uploaded_names() == {name: len(data)}
    assert segments.waiting(set()).waiting == 0


def test_a_crawls_last_segment_goes_up_as_soon_as_it_ends(
    s3: str, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The uploader rounds once a tick; the crawl's end (its finisher's publish on the
    crawl's ``ended`` channel) wakes it, so the last segment is uploaded at once, not up to
    a tick later. The tick is made 30 s once the uploader follows the crawl, to tell."""
    monkeypatch.setattr(uploads, "TICK", 0.1)
    outputs = Outputs()
    out = outputs.get(CRAWL, str(tmp_path), store=s3)
    assert out.final({"url": "https://a.test/", "rid": "r1"})
    up = Uploads(outputs, str(tmp_path), client, Keys(), 1 << 30, 3600.0)
    segments = Segments(client, Keys(), CRAWL)
    try:
        deadline = time.monotonic() + 10
        while not segments.waiting(set()).waiting:  # noted open: a round followed the crawl
            assert time.monotonic() < deadline
            time.sleep(0.05)
        monkeypatch.setattr(uploads, "TICK", 30.0)
        time.sleep(0.5)  # the round under way ends; the next pause is 30 s
        keys = Keys()
        Finisher(client, keys, keys.crawl(CRAWL), CRAWL).finished(Status.FINISHED)
        ended = time.monotonic()
        while segments.waiting(set()).waiting:
            assert time.monotonic() - ended < 5, "not uploaded at the crawl's end"
            time.sleep(0.05)
    finally:
        up.stop(grace=0)
    names = list(objects.store_for(s3).child(CRAWL).list())
    assert len(names) == 1 and names[0].startswith("pages-"), names


def test_a_segment_waits_from_its_first_record(
    s3: str, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is in a segment that Redis knows waits for its upload from the moment it is
    appended: the uploader's round noted a new segment up to a second later, and a reader in
    that second (``crawler crawl`` waiting for the uploads at the crawl's end, an export, a
    test) took a crawl whose last records were staged for one with nothing left to upload."""
    from crawler_tasks.worker.output import uploads

    monkeypatch.setattr(uploads, "TICK", 3600.0)  # no round of its own in this test
    outputs = Outputs()
    up = Uploads(outputs, str(tmp_path), client, Keys(), 1 << 30, 3600.0)
    try:
        out = outputs.get(CRAWL, str(tmp_path), store=s3)
        out.final({"url": "http://127.0.0.1:9/a", "rid": "r1"}, with_items=False)
        waiting = Segments(client, Keys(), CRAWL).waiting({f"{outputs.tag}"})
        assert waiting.waiting >= 1, waiting
    finally:
        outputs.close()
        up.stop(grace=10)
    assert Segments(client, Keys(), CRAWL).waiting(set()).waiting == 0
