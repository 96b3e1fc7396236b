"""An s3:// crawl's output under faults of its processes and of its object store (issue 48),
against a real S3 API server (SeaweedFS, tests/support/seaweed.py) of each test's own, since
the tests stop it: every record in exactly one object of the bucket, every WARC response once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.settings import Settings
from crawler_tasks.state import objects
from crawler_tasks.state.archive import RESPONSE, Archive
from crawler_tasks.state.formats import ArchiveSlot
from crawler_tasks.state.objects import s3 as s3_store
from crawler_tasks.worker.output.archive_fence import ArchiveFence
from crawler_tasks.worker.output.outputs import Outputs
from crawler_tasks.worker.output.segments import STORE_FILE
from crawler_tasks.worker.output.uploads import Uploads
from tests.support.seaweed import Seaweed


@contextlib.contextmanager
def own_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Seaweed, str]]:
    """A SeaweedFS of this test (stopped and restarted by it), this process's AWS environment
    pointed at it, and a new bucket as ``s3://BUCKET/crawls``."""
    with tempfile.TemporaryDirectory(prefix="seaweed-") as tmp:
        weed = Seaweed(Path(tmp))
        try:
            weed.start()
            for name, value in weed.env().items():
                monkeypatch.setenv(name, value)
            s3_store._clients.clear()  # a client of the environment just set
            yield weed, f"s3://{weed.make_bucket('faults')}/crawls"
        finally:
            weed.stop()
            s3_store._clients.clear()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_dead_writers_uploaded_records_are_adopted_while_the_store_is_down(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer reserved a URL's place in the archive, appended its response to its segment
    and died before its commit; the next process of the host uploaded that segment (and
    deleted it here); then the store went down. The URL's next attempt must adopt the dead
    writer's records (the segment grew past the reservation: its size is known from its
    upload), not take the place over and write a second response into the bucket."""
    with own_store(monkeypatch) as (weed, s3):
        crawl = start_crawl(
            ["http://127.0.0.1:9/"], settings=settings, output=s3, allow_private_networks=True
        )
        url, staged = "http://127.0.0.1:9/a", Path(settings.output_dir) / crawl.id
        segment = staged / f"crawl-{socket.gethostname()}-{dead_pid()}-zz-000001.warc.gz"
        dead = ArchiveSlot("<urn:uuid:dead>", str(segment), 0)
        store = crawl.store
        assert Archive(store.client, store.ck, store.ledger.scripts).reserve(RESPONSE, url, dead)
        staged.mkdir(parents=True, exist_ok=True)
        (staged / STORE_FILE).write_text(s3 + "\n")
        segment.write_bytes(b"the dead writer's warcinfo, request and response records")
        up = Uploads(Outputs(), settings.output_dir, store.client, store.r.keys, 1 << 30, 3600.0)
        up.round()
        up.stop(grace=0)
        assert not segment.exists()
        assert objects.store_for(s3).child(crawl.id).exists(segment.name)
        weed.stop()
        again = staged / f"crawl-{socket.gethostname()}-{os.getpid()}-zz-000002.warc.gz"
        fence = ArchiveFence(store, url, RESPONSE, patience=1.0)
        assert fence.reserve(again, 0, "<urn:uuid:again>") == dead.rid
