"""`crawler export` as a user types it: a crawl's items or pages (each URL's last record,
every worker's files merged) as .jsonl, .json, .csv and .parquet, written whole or not at all."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crawler_tasks import Crawl, start_crawl
from tests.support.driver import Driver
from tests.support.paths import HOOKS
from tests.support.sitegen import _simple_page, serve_hosts

# One costly module fixture: the module runs whole on one xdist process (tests/support/scheduling.py).
pytestmark = pytest.mark.one_process


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


SITE = {"/": page("/a", "/b"), "/a": page("/"), "/b": page("/a")}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory, redis_server) -> Iterator[tuple[Crawl, str]]:  # type: ignore[no-untyped-def]
    """One finished crawl with a hook (two items a page), shared by the tests here."""
    from crawler_tasks.settings import load

    out = tmp_path_factory.mktemp("out")
    settings = load(env={}, broker_url=redis_server, output_dir=str(out))
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(HOOKS))
    driver = Driver(settings)
    try:
        with serve_hosts(None, ["127.0.0.143"], extra_routes=SITE) as (server,):
            crawl = start_crawl(
                [server.base_url + "/"], settings=settings, allow_private_networks=True,
                obey_robots=False, rate=math.inf, extract="extract_hooks:two_items", output=str(out),
            )  # fmt: skip
            driver.run(crawl)
        yield crawl, redis_server
    finally:
        driver.close()
        mp.undo()


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "export", *args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_items_in_every_format(crawled, tmp_path, suffix):  # type: ignore[no-untyped-def]
    crawl, broker = crawled
    target = tmp_path / f"items{suffix}"
    result = export(crawl.id, "--items", "-o", str(target), "--broker", broker)
    assert result.returncode == 0, result.stderr
    assert "6 items" in result.stderr
    rows = _read(target)
    assert len(rows) == 6  # 3 pages x 2 items
    assert all(r["page_url"].startswith("http://127.0.0.143") for r in rows)
    titles = [r["title"] for r in rows if r.get("title")]
    assert len(titles) == 3 and all(isinstance(t, str) for t in titles)
    assert not list(tmp_path.glob(".*export*"))  # no temporary file left


def test_pages_last_record_per_url_and_the_same_as_crawl_pages(crawled, tmp_path):  # type: ignore[no-untyped-def]
    crawl, broker = crawled
    target = tmp_path / "pages.jsonl"
    assert export(crawl.id, "--pages", "-o", str(target), "--broker", broker).returncode == 0
    rows = _read(target)
    assert sorted(r["url"] for r in rows) == sorted(r["url"] for r in crawl.pages())
    assert len({r["url"] for r in rows}) == len(rows) == 3
    # --dir reads the files without asking the broker (its state may have expired).
    again = tmp_path / "again.jsonl"
    result = export(crawl.id, "--pages", "-o", str(again), "--dir", str(crawl.output_dir))
    assert result.returncode == 0, result.stderr
    assert _read(again) == rows


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--items", "-o", "{tmp}/x.xlsx"], "unknown format"),
        (["-o", "{tmp}/x.csv"], "--items, --pages or --wacz"),
        (["--items"], "-o FILE"),
        (["--items", "-o", "{tmp}/a.csv", "-O", "{tmp}/b.csv"], "-o FILE"),
        (["--items", "-o", "{tmp}/exists.csv"], "-O overwrites"),
        (["--items", "-o", "{tmp}/no/such/dir/x.csv"], "no directory"),
        (["--items", "-o", "{tmp}"], "is a directory"),
        (["--items", "--pages", "-o", "{tmp}/x.csv"], "--pages or --wacz (one of them)"),
    ],
)
def test_bad_export_is_one_line_exit_2_and_writes_nothing(crawled, tmp_path, args, says):  # type: ignore[no-untyped-def]
    crawl, broker = crawled
    (tmp_path / "exists.csv").write_text("keep me")
    before = sorted(tmp_path.rglob("*"))
    result = export(crawl.id, *[a.format(tmp=tmp_path) for a in args], "--broker", broker)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert sorted(tmp_path.rglob("*")) == before
    assert (tmp_path / "exists.csv").read_text() == "keep me"


def test_unknown_crawl(crawled, tmp_path):  # type: ignore[no-untyped-def]
    _, broker = crawled
    result = export("nope", "--items", "-o", str(tmp_path / "x.csv"), "--broker", broker)
    assert result.returncode == 2 and "nope" in result.stderr
    assert not (tmp_path / "x.csv").exists()


def test_overwrite_replaces(crawled, tmp_path):  # type: ignore[no-untyped-def]
    crawl, broker = crawled
    target = tmp_path / "items.json"
    target.write_text("old")
    assert export(crawl.id, "--items", "-O", str(target), "--broker", broker).returncode == 0
    assert len(json.loads(target.read_text())) == 6


def _read(path: Path) -> list[dict]:  # type: ignore[type-arg]
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if path.suffix == ".json":
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]


def test_parquet_lists_are_lists(crawled, tmp_path):  # type: ignore[no-untyped-def]
    crawl, broker = crawled
    target = tmp_path / "pages.parquet"
    assert export(crawl.id, "--pages", "-o", str(target), "--broker", broker).returncode == 0
    rows = _read(target)
    assert all(isinstance(r["outlinks"], list) for r in rows)
    assert sorted(len(r["outlinks"]) for r in rows) == [1, 1, 2]


def test_files_on_another_host_are_named_with_it(crawled, tmp_path):  # type: ignore[no-untyped-def]
    """The directories come from where each process said it wrote (state/output_places.py),
    not this command's ./data: one on another host is named with its host, exit 2, never
    left out in silence; --partial exports the rest and says what it left out."""
    import redis

    from crawler_tasks.state.output_places import OutputPlaces, Written

    crawl, broker = crawled
    places = OutputPlaces(redis.Redis.from_url(broker), crawl.ck.places)
    [own] = places.read()
    assert Path(own.dir) == crawl.output_dir  # the driver's process noted its directory
    far = Written("far-away", f"/srv/x/{crawl.id}", 7)
    places.note(far)  # what a worker on host far-away notes
    try:
        refused = export(crawl.id, "--pages", "-o", str(tmp_path / "p.csv"), "--broker", broker)
        partial = export(crawl.id, "--pages", "-o", str(tmp_path / "q.csv"), "--partial", "--broker", broker)  # fmt: skip
    finally:
        places.client.hdel(places.key, far.tag)
    said = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(said) == 1, refused.stderr
    assert f"/srv/x/{crawl.id} on far-away" in said[0] and "--partial" in said[0], said
    assert not (tmp_path / "p.csv").exists()
    assert partial.returncode == 0, partial.stderr
    assert f"left out (--partial): /srv/x/{crawl.id} on far-away" in partial.stderr
    assert len(_read(tmp_path / "q.csv")) == 3
