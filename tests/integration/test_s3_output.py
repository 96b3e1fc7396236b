"""A crawl whose ``output`` is ``s3://BUCKET/PREFIX``, against a real S3 API server (SeaweedFS,
tests/support/seaweed.py) and real worker processes: its files staged in segments by each
process, uploaded, read back from the store (``Crawl.pages()``, ``crawler export``), every
record once."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks import start_crawl
from crawler_tasks.settings import Settings
from crawler_tasks.state import objects, workers
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.segments import Segments
from tests.support.seaweed import Seaweed
from tests.support.sitegen import running_sites

pytestmark = pytest.mark.slow

PAGES = 30


@pytest.fixture
def worker_env(s3: str, seaweed: Seaweed) -> dict[str, str]:
    # Segments closed every second: several a process, uploaded while the crawl runs.
    return seaweed.env(CRAWLER_OUTPUT_SEGMENT_SECONDS="1")


def uploaded(settings: Settings, crawl_id: str, timeout: float = 60.0) -> None:
    """Until no segment of the crawl waits for its upload."""
    import redis

    client = redis.Redis.from_url(settings.broker_url)
    keys = Keys(settings.key_prefix)
    deadline = time.monotonic() + timeout
    while True:
        alive = workers.alive(client, keys, settings.worker_dead_seconds)
        waiting = Segments(client, keys, crawl_id).waiting(alive)
        if not waiting.waiting:
            return
        assert time.monotonic() < deadline, waiting
        time.sleep(0.3)


def test_an_s3_crawl_lands_every_record_once_in_the_bucket(
    s3: str, seaweed: Seaweed, settings: Settings, workers: list, tmp_path: Path
) -> None:
    with running_sites(["127.0.0.151"], PAGES, 3) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, output=s3,
            allow_private_networks=True, obey_robots=False, rate=math.inf,
        )  # fmt: skip
        summary = crawl.wait(timeout=120)
    assert summary["status"] == "finished", summary
    uploaded(settings, crawl.id)
    store = objects.store_for(s3).child(crawl.id)
    names = list(store.list())
    assert "summary.json" in names
    assert json.loads(store.get("summary.json"))["status"] == "finished"
    assert crawl.progress()["summary_path"] == f"{s3}/{crawl.id}/summary.json"
    # Every page's record once, read from the store.
    pages = list(crawl.pages(latest=False))
    urls = [p["url"] for p in pages]
    assert len(urls) == len(set(urls)) == summary["counters"]["done"] >= PAGES
    # Every WARC object reads whole; one response a page.
    responses = []
    for name in names:
        if name.endswith(".warc.gz"):
            for record in ArchiveIterator(io.BytesIO(store.get(name))):
                if record.rec_type == "response":
                    responses.append(record.rec_headers.get_header("WARC-Target-URI"))
    assert len(responses) == len(set(responses)) == len(urls)
    # Nothing is left staged: the workers' CRAWLER_OUTPUT_DIR holds only the marker.
    staged = Path(settings.output_dir) / crawl.id
    assert sorted(p.name for p in staged.iterdir() if not p.name.startswith(".")) == []
    # The export reads the store, from a process that never saw the staging directory.
    out = tmp_path / "pages.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "export", crawl.id, "--pages"]
        + ["-o", str(out), "--broker", settings.broker_url],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, **seaweed.env(CRAWLER_OUTPUT_DIR=str(tmp_path / "elsewhere"))},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == len(urls)
    assert gzip  # (the WARC objects are gzip members: read by warcio above)
