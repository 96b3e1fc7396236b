"""`crawler export CRAWL_ID --wacz -o crawl.wacz` of a real crawl: a WACZ 1.1.1 file whose
datapackage.json lists every file with its sha256 and size, whose CDXJ index is sorted and has
one response line per page, whose pages.jsonl has one line per page, and whose WARCs are the
crawl's own, byte for byte, stored (not deflated)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler_tasks import Crawl, start_crawl
from tests.support import cli_process
from tests.support.driver import Driver
from tests.support.sitegen import _simple_page, serve_hosts

pytestmark = pytest.mark.one_process


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


# Fetched /z first, then /m: the WARC's records are not in the index's order, so that the
# index is sorted by the export, not by luck.
SITE = {"/z": page("/m", "/a"), "/m": page("/z"), "/a": page("/m", "/b"), "/b": page("/z")}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory, redis_server) -> Iterator[tuple[Crawl, str, Path]]:  # type: ignore[no-untyped-def]
    from crawler_tasks.settings import load

    out = tmp_path_factory.mktemp("out")
    settings = load(env={}, broker_url=redis_server, output_dir=str(out))
    driver = Driver(settings)
    try:
        with serve_hosts(None, ["127.0.0.174"], extra_routes=SITE) as (server,):
            crawl = start_crawl(
                [server.base_url + "/z"], settings=settings, allow_private_networks=True,
                obey_robots=False, rate=math.inf, output=str(out),
            )  # fmt: skip
            driver.run(crawl)
        yield crawl, redis_server, out / crawl.id
    finally:
        driver.close()


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_process.run("export", *args, timeout=120)


def test_wacz_holds_the_crawl(crawled, tmp_path):  # type: ignore[no-untyped-def]
    crawl, broker, directory = crawled
    target = tmp_path / "crawl.wacz"
    result = export(crawl.id, "--wacz", "-o", str(target), "--broker", broker)
    assert result.returncode == 0, result.stderr
    assert "4 pages archived" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crawl.wacz"]  # no temporary left
    urls = {r["url"] for r in crawl.pages()}
    assert len(urls) == 4
    warcs = sorted(directory.glob("crawl-*.warc.gz"))
    assert warcs

    with zipfile.ZipFile(target) as zf:
        package = json.loads(zf.read("datapackage.json"))
        assert package["profile"] == "data-package" and package["wacz_version"] == "1.1.1"
        assert package["created"].endswith("Z") and package["software"].startswith("crawler")
        listed = {r["path"]: r for r in package["resources"]}
        names = set(zf.namelist()) - {"datapackage.json"}
        assert set(listed) == names
        assert names == {f"archive/{w.name}" for w in warcs} | {
            "indexes/index.cdx",
            "pages/pages.jsonl",
        }
        for path, resource in listed.items():
            data = zf.read(path)
            assert resource["name"] == path.rsplit("/", 1)[-1]
            assert resource["bytes"] == len(data) == zf.getinfo(path).file_size
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
        for warc in warcs:
            info = zf.getinfo(f"archive/{warc.name}")
            assert info.compress_type == zipfile.ZIP_STORED
            assert zf.read(info) == warc.read_bytes()

        index = zf.read("indexes/index.cdx").decode().splitlines()
        assert index == sorted(index)
        entries = [json.loads(line.split(" ", 2)[2]) for line in index]
        responses = [e for e in entries if e.get("mime") != "warc/revisit"]
        assert sorted(e["url"] for e in responses) == sorted(urls)
        assert {e["filename"] for e in entries} <= {w.name for w in warcs}

        pages = [json.loads(line) for line in zf.read("pages/pages.jsonl").splitlines()]
    assert pages[0] == {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
    assert sorted(p["url"] for p in pages[1:]) == sorted(urls)
    assert all(p["ts"].endswith("Z") and p.get("title") for p in pages[1:])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nope", "--wacz", "-o", "{tmp}/x.wacz"], "no crawl"),
        (["{crawl}", "--wacz", "-o", "{tmp}/no/such/dir/x.wacz"], "no directory"),
        (["{crawl}", "--wacz", "-o", "{tmp}/x.zip"], "unknown format"),
        (["{crawl}", "--wacz", "-o", "s3://bucket/x.wacz"], "writes a local file"),
        (["{crawl}", "--wacz", "-o", "{tmp}/x.wacz", "--dir", "{tmp}/empty"], "no WARC files"),
        (["{crawl}", "--wacz", "--pages", "-o", "{tmp}/x.wacz"], "one of them"),
    ],
)
def test_bad_wacz_export_is_one_line_exit_2_and_writes_nothing(crawled, tmp_path, args, says):  # type: ignore[no-untyped-def]
    crawl, broker, _ = crawled
    (tmp_path / "empty").mkdir()
    before = sorted(tmp_path.rglob("*"))
    given = [a.format(tmp=tmp_path, crawl=crawl.id) for a in args]
    result = export(*given, "--broker", broker)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_wacz_of_objects_in_an_s3_store(crawled, s3, tmp_path):  # type: ignore[no-untyped-def]
    """The same crawl's files as objects of a real S3 API server (an s3:// crawl's place, as
    export finds it): the same WARCs, index and pages as from the directory."""
    from crawler_tasks.state import objects
    from crawler_tasks.surface import wacz

    crawl, _, directory = crawled
    store = objects.store_for(s3).child(crawl.id)
    for path in directory.iterdir():
        if path.is_file() and not path.name.startswith("."):
            store.put_file(path.name, path)
    names = wacz.warc_names(store)
    assert names == wacz.warc_names(directory) != []
    assert wacz.write(store, names, tmp_path / "s3.wacz", crawl.id) == 4
    assert wacz.write(directory, names, tmp_path / "dir.wacz", crawl.id) == 4
    with zipfile.ZipFile(tmp_path / "s3.wacz") as a, zipfile.ZipFile(tmp_path / "dir.wacz") as b:
        assert a.namelist() == b.namelist()
        for name in a.namelist():
            if name != "datapackage.json":  # its "created" differs
                assert a.read(name) == b.read(name), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.wacz", "s3.wacz"]
