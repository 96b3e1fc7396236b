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
    # The summary a caller gets is the store's, at once: no poll for a local summary.json,
    # which an s3:// crawl never writes here (each wait() took 2 s longer).
    t0 = time.monotonic()
    assert crawl.summary() == json.loads(store.get("summary.json")) == summary
    assert time.monotonic() - t0 < 1.0
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


def test_crawl_returns_once_its_records_are_in_the_store(
    s3: str, seaweed: Seaweed, redis_url: str, worker_logs: Path, tmp_path: Path
) -> None:
    """``crawler crawl --output s3://`` against workers of their own: the command returns
    once the last segments are uploaded, so an export right after has every page."""
    from crawler_tasks.surface.embedded import local_workers
    from tests.support.processes import stop_together

    env = {**os.environ, **seaweed.env()}
    with (
        running_sites(["127.0.0.152"], 12, 3) as (_, servers),
        local_workers(redis_url, redis_url, fetch_threads=8, fetchers=1, log_dir=str(worker_logs),
                      extra_env=seaweed.env()) as procs,
    ):  # fmt: skip
        try:
            crawl = subprocess.run(
                [sys.executable, "-m", "crawler_tasks.surface.cli", "crawl"]
                + [servers[0].base_url + "/", "--broker", redis_url, "--output", s3]
                + ["--allow-private-networks", "--default-rate", "inf", "--json"],
                capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path,
            )  # fmt: skip
        finally:
            stop_together(procs)
    assert crawl.returncode == 0, crawl.stderr
    summary = json.loads(crawl.stdout)
    crawl_id = summary["crawl_id"]
    assert summary["output_dir"] == f"{s3}/{crawl_id}"
    out = tmp_path / "pages.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "export", crawl_id, "--pages"]
        + ["-o", str(out), "--broker", redis_url],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == summary["counters"]["done"] >= 12
