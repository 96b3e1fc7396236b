"""`crawler export CRAWL_ID --wacz -o crawl.wacz` of a real crawl: a WACZ 1.1.1 file whose
datapackage.json lists every file with its sha256 and size, whose CDXJ index is sorted and has
one response line per page, whose pages.jsonl has one line per page, and whose WARCs are the
crawl's own, byte for byte, stored (not deflated)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
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
        (["{crawl}", "--wacz", "-o", "gs://bucket/x.wacz"], "not a place the crawler writes"),
        (["{crawl}", "--pages", "-o", "s3://bucket/x.jsonl"], "write a local file"),
        (["{crawl}", "--wacz", "-o", "s3://bucket"], "name the object"),
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


def test_wacz_to_an_s3_object(crawled, s3, seaweed, tmp_path):  # type: ignore[no-untyped-def]
    """`--wacz -o s3://BUCKET/PREFIX/NAME.wacz` PUTs the WACZ (the AWS SDK's chain and
    AWS_ENDPOINT_URL, as output's segments): the object holds the same entries as the local
    export's; a second -o refuses the object that is there, -O replaces it; a bucket that is
    not there is one line and exit 2, checked before anything is read."""
    crawl, broker, _ = crawled
    url = f"{s3}/exports/crawl.wacz"
    sent = export(crawl.id, "--wacz", "-o", url, "--broker", broker)
    assert sent.returncode == 0, sent.stderr
    assert f"written to {url}" in sent.stderr
    bucket, key = url.removeprefix("s3://").split("/", 1)
    body = seaweed.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    (tmp_path / "got.wacz").write_bytes(body)
    assert export(crawl.id, "--wacz", "-o", str(tmp_path / "here.wacz"), "--broker", broker).returncode == 0  # fmt: skip
    with zipfile.ZipFile(tmp_path / "got.wacz") as got, zipfile.ZipFile(tmp_path / "here.wacz") as here:  # fmt: skip
        assert got.namelist() == here.namelist()
        assert all(got.read(n) == here.read(n) for n in got.namelist() if n != "datapackage.json")

    again = export(crawl.id, "--wacz", "-o", url, "--broker", broker)
    assert again.returncode == 2 and "exists: -O" in again.stderr, again.stderr
    assert export(crawl.id, "--wacz", "-O", url, "--broker", broker).returncode == 0
    missing = export(crawl.id, "--wacz", "-o", "s3://no-such-bucket-here/x.wacz", "--broker", broker)  # fmt: skip
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode == 2 and len(lines) == 1 and "no-such-bucket-here" in lines[0], lines


@pytest.mark.parametrize("plain_max", [1_000, 3])
def test_index_plain_or_compressed_above_the_threshold(crawled, tmp_path, monkeypatch, plain_max):  # type: ignore[no-untyped-def]
    """Up to wacz_index_lines lines a plain indexes/index.cdx; above, WACZ 1.1.1's ZipNum
    pair: index.cdx.gz (gzip members of BLOCK_LINES lines, 2 here so that there are several)
    and index.idx (a meta line, then each member's first key, offset, length and sha256),
    whose blocks hold the plain index's lines in order. `wacz validate` (the wacz package's
    own checker, where installed) passes both."""
    import gzip

    from crawler_tasks.surface import wacz, wacz_index

    crawl, _, directory = crawled
    monkeypatch.setattr(wacz_index, "BLOCK_LINES", 2)
    target = tmp_path / "crawl.wacz"
    assert wacz.write(directory, wacz.warc_names(directory), target, crawl.id, plain_max) == 4
    validator = Path(sys.executable).with_name("wacz")  # the test extra installs it
    checked = subprocess.run([str(validator), "validate", "-f", str(target)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert checked.returncode == 0 and "Validation succeeded" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    with zipfile.ZipFile(target) as zf:
        names = set(zf.namelist())
        listed = {r["path"] for r in json.loads(zf.read("datapackage.json"))["resources"]}
        assert {n for n in names if n.startswith("indexes/")} <= listed
        if plain_max == 1_000:
            assert "indexes/index.cdx" in names and "indexes/index.idx" not in names
            return
        assert "indexes/index.cdx" not in names
        idx = zf.read("indexes/index.idx").decode().splitlines()
        cdx = zf.read("indexes/index.cdx.gz")
    meta = json.loads(idx[0].split(" ", 2)[2])
    assert idx[0].startswith("!meta 0 ") and meta == {"format": "cdxj-gzip-1.0", "filename": "index.cdx.gz"}  # fmt: skip
    blocks, lines = idx[1:], []
    assert len(blocks) >= 2 and [b.split(" ")[0] for b in blocks] == sorted(b.split(" ")[0] for b in blocks)  # fmt: skip
    for block in blocks:
        key, _, rest = block.partition(" ")
        at = json.loads(rest.split(" ", 1)[1])
        data = cdx[at["offset"] : at["offset"] + at["length"]]
        assert at["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
        got = gzip.decompress(data).decode().splitlines()
        assert 1 <= len(got) <= 2 and got[0].startswith(key + " ")
        lines += got
    assert sum(at["length"] for at in (json.loads(b.split(" ", 2)[2]) for b in blocks)) == len(cdx)  # fmt: skip
    assert len(lines) > plain_max and lines == sorted(lines)
