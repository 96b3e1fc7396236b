"""pywb, the reference replay tool, as the replay tests drive it: collections of a crawl's WARC
files indexed with cdxj-indexer (or a WACZ added with ``wb-manager add``), served by pywb's own
``wayback`` on a free loopback port, pages fetched back in identity mode (``id_``: the
archived payload and headers, not rewritten).

pywb pins old libraries (redis 2.10, fakeredis 0.16) that conflict with the project's, so it
lives in a venv of its own, ``.venv-pywb`` beside ``.venv``, made by ``make pywb`` (a
prerequisite of ``make test``; called here when it is missing, for a test run alone), and runs
only as subprocesses.
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.sitegen import free_port

VENV = ROOT / ".venv-pywb"
BIN = VENV / "bin"


def ensure_installed() -> Path:
    """pywb's venv, made by ``make pywb`` if it is not there yet."""
    if not (BIN / "wayback").exists():
        subprocess.run(["make", "-s", "pywb"], cwd=ROOT, check=True, timeout=600)
    return BIN


def version() -> str:
    out = subprocess.run([str(BIN / "wayback"), "-V"], capture_output=True, text=True)
    return (out.stdout or out.stderr).strip()


def add_warcs(root: Path, coll: str, warcs: list[Path]) -> None:
    """Collection ``coll`` under ``root`` holding ``warcs``, indexed by cdxj-indexer (the
    project's test extra, as ``crawler export --wacz`` indexes) into one sorted index."""
    _init(root, coll)
    archive = root / "collections" / coll / "archive"
    for warc in warcs:  # each run's directory names its files as the others (crawl-HOST-PID)
        shutil.copy(warc, archive / f"{warc.parent.name}-{warc.name}")
    indexer = Path(sys.executable).with_name("cdxj-indexer")
    names = sorted(p.name for p in archive.iterdir())
    index = subprocess.run(
        [str(indexer), "--sort", *names], cwd=archive, capture_output=True, check=True
    ).stdout
    (root / "collections" / coll / "indexes" / "index.cdxj").write_bytes(index)


def add_wacz(root: Path, coll: str, wacz: Path) -> None:
    """Collection ``coll`` holding one WACZ, as an archivist adds it (pywb >= 2.8; 2.10 asks
    for ``--unpack-wacz``: its WARCs go to the collection's archive, its own CDXJ index to the
    collection's, filenames rewritten, so the WACZ's index is what pywb looks pages up in)."""
    _init(root, coll)
    _manager(root, "add", "--unpack-wacz", coll, str(wacz))


def _init(root: Path, coll: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    _manager(root, "init", coll)


def _manager(root: Path, *args: str) -> None:
    done = subprocess.run(
        [str(BIN / "wb-manager"), *args], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])


@dataclass
class Replayed:
    status: int
    headers: dict[str, str]  #: keys lower-cased
    body: bytes  #: as pywb sent it (content coding not undone)


@dataclass
class Wayback:
    port: int

    def get(self, coll: str, timestamp: str, url: str) -> Replayed:
        """``url`` as of ``timestamp`` (14 digits) from ``coll``, in identity mode."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(
                "GET", f"/{coll}/{timestamp}id_/{url}", headers={"Accept-Encoding": "gzip, br"}
            )
            resp = conn.getresponse()
            body = resp.read()
            headers = {k.lower(): v for k, v in resp.getheaders()}
            return Replayed(resp.status, headers, body)
        finally:
            conn.close()


@contextlib.contextmanager
def wayback(root: Path) -> Iterator[Wayback]:
    """pywb's ``wayback`` serving the collections under ``root`` on a free loopback port."""
    port = free_port()
    log = open(root / "wayback.log", "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(
        [str(BIN / "wayback"), "-p", str(port), "-b", "127.0.0.1", "-t", "4"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_listening(port, proc, root)
        yield Wayback(port)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _wait_listening(port: int, proc: subprocess.Popen[bytes], root: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (root / "wayback.log").read_text()[-3000:]
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/")
            conn.getresponse().read()
            conn.close()
            return
        time.sleep(0.1)
    raise AssertionError("wayback did not listen in 60 s: " + (root / "wayback.log").read_text())
