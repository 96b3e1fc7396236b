"""A crawl whose workers run in different directories, on one machine, as the README's
per-host commands start them: each fetch process and the parse process in a directory of its
own, writing under its own ``./data``. Its readers (``crawler export``, ``Crawl.pages()``,
``Crawl.items()``, the WACZ, ``crawler status --json``) find every process's records from
yet another directory; a directory gone from this host is named (exit 2, or
OutputUnreadable), and ``--partial`` / ``partial=True`` read the rest and say what they left
out. Never a silent partial export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.faults.test_faults import cluster, one_host_each, start, wait
from tests.support.paths import HOOKS
from tests.support.sitegen import running_sites

pytestmark = pytest.mark.slow


def crawler(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=dict(os.environ),
    )  # fmt: skip


def lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def test_readers_find_every_workers_directory(settings, redis_url, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(HOOKS))  # the crawl's hook, checked as it starts
    homes = {name: tmp_path / name for name in ("fetch1", "fetch2", "parse", "reader")}
    for home in homes.values():
        home.mkdir()
    # Each worker's CRAWLER_OUTPUT_DIR is the default ./data of its own working directory.
    path = os.pathsep.join([str(HOOKS), os.environ.get("PYTHONPATH", "")])
    with cluster(redis_url, tmp_path) as c:
        c.base = {k: v for k, v in c.base.items() if k != "CRAWLER_OUTPUT_DIR"}
        c.base["PYTHONPATH"] = path
        for name in ("fetch1", "fetch2", "parse"):
            c.start(name, "parse" if name == "parse" else "fetch", cwd=homes[name])
        addresses = one_host_each(c, settings, ("fetch1", "fetch2"))
        with running_sites(list(addresses), 20, 4, cross_host_ratio=0.05) as (_graph, servers):
            _seeds, crawl = start(settings, servers, extract="extract_hooks:two_items")
            summary = wait(crawl, 120)
    assert summary["status"] == "finished"
    done = summary["counters"]["done"]
    dirs = [homes[n] / "data" / crawl.id for n in ("fetch1", "fetch2")]
    spread = {d: len(list(d.glob("pages-*.jsonl"))) for d in dirs}
    assert all(spread.values()), spread  # each fetch process wrote records in its own place
    assert not (Path(settings.output_dir) / crawl.id).exists()  # the test's own ./data: none

    # Python, from a process whose ./data holds nothing of the crawl.
    urls = {r["url"] for r in crawl.pages()}
    assert len(urls) == done >= 40, (len(urls), done)
    items = list(crawl.items())
    with_items = {i["url"] for i in items}  # every HTML page's two items, from both hosts
    assert len(items) == 2 * len(with_items) and with_items <= urls, (len(items), with_items)
    assert {u.split("/")[2].split(":")[0] for u in with_items} == set(addresses)

    # The CLI, from another directory still.
    reader, broker = homes["reader"], ("--broker", redis_url)
    pages = crawler(reader, "export", crawl.id, "--pages", "-o", "pages.jsonl", *broker)
    assert pages.returncode == 0, pages.stderr
    assert {json.loads(line)["url"] for line in lines(reader / "pages.jsonl")} == urls
    wacz = crawler(reader, "export", crawl.id, "--wacz", "-o", "crawl.wacz", *broker)
    assert wacz.returncode == 0, wacz.stderr
    with zipfile.ZipFile(reader / "crawl.wacz") as zf:
        archived = [n for n in zf.namelist() if n.startswith("archive/")]
        listed = zf.read("pages/pages.jsonl").decode().splitlines()[1:]
    assert len({n.split("-")[-1] for n in archived}) >= 2, archived  # both processes' WARCs
    assert {json.loads(line)["url"] for line in listed} == urls
    status = crawler(reader, "status", crawl.id, "--json", *broker)
    shown = json.loads(status.stdout)
    assert Path(shown["summary_path"]).is_file() and shown["summary_host"], shown

    # A directory that is no longer there: named, exit 2; --partial exports the rest.
    from crawler_tasks.errors import OutputUnreadable, PartialOutput

    gone = dirs[1]
    gone.rename(gone.with_name("moved"))
    refused = crawler(reader, "export", crawl.id, "--pages", "-o", "p2.jsonl", *broker)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"{gone} on this host: no such directory" in line, line
    assert not (reader / "p2.jsonl").exists()
    partial = crawler(reader, "export", crawl.id, "--pages", "-o", "p3.jsonl", "--partial", *broker)  # fmt: skip
    assert partial.returncode == 0, partial.stderr
    assert f"left out (--partial): {gone} on this host" in partial.stderr
    kept = {json.loads(line)["url"] for line in lines(reader / "p3.jsonl")}
    assert kept and kept < urls
    with pytest.raises(OutputUnreadable, match=str(gone)):
        crawl.pages()
    with pytest.warns(PartialOutput, match=str(gone)):
        assert {r["url"] for r in crawl.pages(partial=True)} == kept
