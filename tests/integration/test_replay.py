"""Replay conformance (issue 48 item 3): a crawl's WARC files, indexed with cdxj-indexer and
served by pywb (tests/support/pywb.py), give back every page as the server sent it; so do
those of a second run of the schedule, as of its own date, where the pages that answered 304
or sent the same payload are revisit records: each resolves to the first run's payload with
status 200. And the first run's WACZ (``crawler export --wacz``) added to pywb replays every
page.

Pages served gzip, br, chunked, gzip and chunked, cut at max_body_bytes, a redirect, and a
page on a host rendered in Chromium (its raw response is what is archived and replayed), by
real worker processes (fetch, parse, render)."""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import brotli
import pytest

from crawler_tasks import start_crawl
from crawler_tasks.surface.embedded import local_workers
from tests.integration.test_s3_output import uploaded
from tests.support import cli_process, pywb
from tests.support.recrawl_site import cdxj
from tests.support.sitegen import Handler, SiteServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

LIMIT = 64 * 1024  #: the crawl's max_body_bytes: /big is cut there
LAST_MODIFIED = "Sat, 28 Nov 2026 10:00:00 GMT"


def text(path: str, size: int = 3000) -> bytes:
    words = " ".join(f"{path}-{i}" for i in range(size // 8))
    return f"<html><head><title>{path}</title></head><body><p>{words}</p></body></html>".encode()


def _coded(body: bytes, coding: str | None) -> bytes:
    if coding == "gzip":
        return gzip.compress(body, 6, mtime=0)
    if coding == "br":
        return bytes(brotli.compress(body))
    return body


def page(
    body: bytes, coding: str | None = None, chunked: bool = False, validators: bool = True
) -> Callable[[Handler], None]:
    """A page with validators (ETag, Last-Modified): 304 to a request that names its ETag;
    else its body, content-coded as ``coding`` says, in chunks or with a Content-Length.
    Without ``validators``: the body every time (a recrawl's identical-payload revisit)."""
    etag = '"' + hashlib.md5(body).hexdigest() + '"'
    wire = _coded(body, coding)
    said = (("ETag", etag), ("Last-Modified", LAST_MODIFIED)) if validators else ()

    def route(h: Handler) -> None:
        if h.headers.get("If-None-Match") == etag:
            h.send_response(304)
            for name, value in (("ETag", etag), ("Last-Modified", LAST_MODIFIED)):
                h.send_header(name, value)
            h.send_header("Cache-Control", "max-age=60")
            h.end_headers()
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/html; charset=utf-8")
        for name, value in said:
            h.send_header(name, value)
        h.send_header("Cache-Control", "max-age=30")
        if coding:
            h.send_header("Content-Encoding", coding)
        if not chunked:
            h.send_header("Content-Length", str(len(wire)))
            h.end_headers()
            h.wfile.write(wire)
            return
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i in range(0, len(wire), 1000):
            piece = wire[i : i + 1000]
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        h.wfile.write(b"0\r\n\r\n")

    return route


#: path -> (decoded body, content coding): what the site serves.
PAGES: dict[str, tuple[bytes, str | None, bool]] = {
    "/gzip": (text("gzip"), "gzip", False),
    "/br": (text("br"), "br", False),
    "/chunked": (text("chunked"), None, True),
    "/gzip-chunked": (text("gzip-chunked"), "gzip", True),
    "/big": (text("big", 3 * LIMIT), None, True),  # no length: cut, not refused
    "/target": (text("target"), None, False),
}


#: A page without validators, the same gzip bytes each time: an identical-payload-digest revisit.
SAME = text("same")


def index(rendered_url: str) -> bytes:
    links = "".join(f'<a href="{p}">{p}</a>' for p in [*PAGES, "/redirect", "/same"])
    return f'<html><body>{links}<a href="{rendered_url}">r</a></body></html>'.encode()


def routes(rendered_url: str) -> dict[str, Callable[[Handler], None]]:
    site = {"/": page(index(rendered_url))}
    site.update(
        {path: page(body, coding, chunked) for path, (body, coding, chunked) in PAGES.items()}
    )
    site["/redirect"] = lambda h: h.redirect("/target")
    site["/same"] = page(SAME, "gzip", validators=False)
    return site


#: The rendered host's page (served gzip): the raw response is archived, the DOM beside it.
RENDERED = (
    b"<html><body><p>rendered</p>"
    b"<script>document.body.appendChild(document.createElement('p'))</script></body></html>"
)


def rendered_routes() -> dict[str, Callable[[Handler], None]]:
    return {"/": page(RENDERED, "gzip")}


def crawl_once(settings: Any, site: SiteServer, rendered: SiteServer, output: str) -> Any:
    """One run of the schedule, its output in ``output`` (s3://...) or "" (the workers' own
    directory); an s3:// run's segments all uploaded."""
    hosts = [site.address, rendered.address]
    crawl = start_crawl(
        [site.base_url + "/"], settings=settings, schedule="replay", allow_private_networks=True,
        allowed_domains=hosts, rates={h: math.inf for h in hosts}, rate=math.inf,
        obey_robots=False, max_body_bytes=LIMIT, render_hosts={rendered.address: "always"},
        max_retries=0, **({"output": output} if output else {}),
    )  # fmt: skip
    summary = crawl.wait(timeout=200)
    assert summary["status"] == "finished", summary
    if output:
        uploaded(settings, crawl.id)
    return crawl


def warc_files(crawl: Any, into: Path) -> Path:
    """The directory of the crawl's WARC files: its output directory, or for an s3:// crawl
    the objects downloaded into ``into`` (pywb and cdxj-indexer read files)."""
    files = crawl.files
    if isinstance(files, Path):
        return files
    into.mkdir(parents=True)
    for name in files.list():
        if fnmatch.fnmatch(Path(name).name, "crawl-*.warc.gz"):
            (into / Path(name).name).write_bytes(files.get(name))
    return into


def expected(site: SiteServer, rendered: SiteServer) -> dict[str, bytes]:
    """URL -> the decoded body the server sent (cut at the limit where the crawl cut it)."""
    want = {site.base_url + p: body[:LIMIT] for p, (body, _, _) in PAGES.items()}
    want[site.base_url + "/redirect"] = b""
    want[site.base_url + "/same"] = SAME
    want[site.base_url + "/"] = index(rendered.base_url + "/")
    want[rendered.base_url + "/"] = RENDERED
    return want


@pytest.mark.timeout(400)
@pytest.mark.parametrize("where", ["local", "s3"])
def test_every_page_replays_in_pywb_both_runs_and_from_a_wacz(
    settings, redis_url, worker_logs, worker_env, tmp_path, request, where
):  # type: ignore[no-untyped-def]
    """Both runs' WARCs and the first run's WACZ, with the crawl's output in the workers'
    directories or in an object store (read back from the bucket: issue 48's target)."""
    pywb.ensure_installed()
    output, env = "", dict(worker_env)
    if where == "s3":  # a real S3 server (SeaweedFS); the workers and the CLI pointed at it
        output = request.getfixturevalue("s3")
        env.update(request.getfixturevalue("seaweed").env())
    began = time.monotonic()
    with (
        SiteServer(address="127.0.0.191") as site,
        SiteServer(address="127.0.0.192", extra_routes=rendered_routes()) as rendered,
        local_workers(redis_url, redis_url, fetchers=1, parsers=1, renderers=1,
                      log_dir=str(worker_logs), extra_env=env),
    ):  # fmt: skip
        site.extra_routes.update(routes(rendered.base_url + "/"))
        first = crawl_once(settings, site, rendered, output)
        time.sleep(1.1)  # the second run's records a second later: another 14-digit timestamp
        second = crawl_once(settings, site, rendered, output)
        wacz = tmp_path / "first.wacz"
        done = cli_process.run(
            "export", first.id, "--wacz", "-o", str(wacz), "--broker", redis_url, timeout=120
        )
        assert done.returncode == 0, done.stderr
    crawled = time.monotonic()
    want = expected(site, rendered)
    pages = {r["url"]: r for r in first.pages()}
    assert pages[rendered.base_url + "/"]["rendered"] is True
    assert pages[site.base_url + "/big"]["truncated"] is True
    assert not any(r["truncated"] for u, r in pages.items() if not u.endswith("/big"))
    first_dir = warc_files(first, tmp_path / "first-warcs")
    second_dir = warc_files(second, tmp_path / "second-warcs")
    root = tmp_path / "pywb"
    pywb.add_warcs(root, "first", sorted(first_dir.glob("crawl-*.warc.gz")))
    pywb.add_warcs(
        root,
        "both",
        sorted([*first_dir.glob("crawl-*.warc.gz"), *second_dir.glob("crawl-*.warc.gz")]),
    )
    pywb.add_wacz(root, "wacz", wacz)
    firsts = _captures(first_dir)
    seconds = _captures(second_dir)
    assert set(firsts) == set(want) and set(seconds) == set(want), (sorted(firsts), sorted(seconds))
    revisits = {u for u, e in seconds.items() if e.get("mime") == "warc/revisit"}
    # Every page answered 304, or the same payload (/same): each is a revisit, but the redirect.
    assert revisits == set(want) - {site.base_url + "/redirect"}, sorted(revisits)
    with pywb.wayback(root) as wb:
        for coll in ("first", "wacz"):
            for url, entry in firsts.items():
                _assert_replays(
                    wb.get(coll, entry["timestamp"], url), entry, want[url], (coll, url)
                )
        for url, entry in seconds.items():
            original = firsts[url] if url in revisits else entry
            got = wb.get("both", entry["timestamp"], url)
            _assert_replays(got, original, want[url], ("second", url, entry))
    took = time.monotonic() - crawled
    print(f"{pywb.version()}: crawled in {crawled - began:.1f} s, replayed in {took:.1f} s")


def _captures(directory: Path) -> dict[str, dict[str, Any]]:
    """URL -> its response or revisit line of cdxj-indexer's index of the crawl's WARCs."""
    return {e["url"]: e for e in cdxj(directory) if e.get("mime") != "warc/request"}


def _assert_replays(got: pywb.Replayed, entry: dict[str, Any], body: bytes, where: Any) -> None:
    """pywb's answer is the archived capture ``entry``: its status, and ``body`` decoded."""
    assert got.status == int(entry.get("status", 200)), (where, got.status, got.headers)
    decoded = got.body
    coding = got.headers.get("content-encoding")
    if coding == "gzip":
        decoded = gzip.decompress(got.body)
    elif coding == "br":
        decoded = brotli.decompress(got.body)
    assert decoded == body, (where, got.headers, got.body[:200])
