"""``crawler export CRAWL_ID --wacz -o crawl.wacz``: a crawl as one Web Archive Collection
Zipped (WACZ 1.1.1, https://specs.webrecorder.net/wacz/1.1.1/), the file ReplayWeb.page and
pywb open directly.

The ZIP holds ``archive/`` (the crawl's WARC files, byte for byte as the workers wrote them),
``indexes/index.cdx`` (sorted CDXJ made by ``cdxj-indexer``, the replay tools' own indexer,
rather than one of ours that could disagree with them; named ``.cdx`` as py-wacz names it: the
spec leaves the name free, and pywb 2.10's ``wb-manager add --unpack-wacz`` reads only
``*.cdx`` and ``*.cdx.gz`` indexes, so an ``index.cdxj`` made it an empty collection; for a
big crawl the compressed ``index.cdx.gz`` and ``index.idx`` instead: wacz_index.py),
``pages/pages.jsonl`` (a header line, then one line per page fetched) and ``datapackage.json``
(every other file with its sha256 and size). Every entry is stored, not deflated: the WARCs
are gzip already, and a stored WARC can be read at an offset inside the ZIP, which is how
replay tools use the index.

As the other exports, the file is written under a temporary name beside the target and
renamed over it at the end, so that a killed export never leaves half a WACZ under its name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, BinaryIO

from .. import __version__
from ..settings import Settings
from ..state.objects import ObjectStore
from ..worker.output.read import Place, latest_pages, local_files
from . import wacz_index

WACZ_VERSION = "1.1.1"
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
#: The names every worker gives its WARC files (worker/output/files.py), staged or uploaded.
WARC_PREFIX, WARC_SUFFIX = "crawl-", ".warc.gz"


def warc_names(place: Place) -> list[str]:
    """The crawl's WARC files, sorted: the names of its objects, or of its directories' files."""
    if isinstance(place, ObjectStore):
        names = place.list(WARC_PREFIX)
    else:
        names = (p.name for p in local_files(place, f"{WARC_PREFIX}*{WARC_SUFFIX}"))
    return sorted(n for n in names if n.endswith(WARC_SUFFIX) and "/" not in n)


def _iso(seconds: float) -> str:
    """RFC 3339 in UTC with milliseconds, as pages.jsonl's ``ts`` and ``created`` want it."""
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def page_lines(place: Place) -> list[dict[str, Any]]:
    """One entry per page that was fetched (it has a status, so it is in the WARCs), each
    URL's last record, in the order they were fetched. Pages that failed before a response
    are left out: there is nothing of them to replay."""
    fetched = [record for record in latest_pages(place) if record.get("status") is not None]
    fetched.sort(key=lambda r: (r.get("fetched_at") or 0, r["url"]))
    lines = []
    for record in fetched:
        line = {"url": record["url"], "ts": _iso(record.get("fetched_at") or 0)}
        if record.get("title"):
            line["title"] = record["title"]
        lines.append(line)
    return lines


class _Hashed:
    """Copies a stream into a ZIP entry, counting its bytes and their sha256 on the way."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def copy(self, source: IO[bytes], sink: IO[bytes]) -> None:
        while chunk := source.read(1 << 20):
            self.sha256.update(chunk)
            self.bytes += len(chunk)
            sink.write(chunk)

    def resource(self, path: str) -> dict[str, Any]:
        return {
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "hash": f"sha256:{self.sha256.hexdigest()}",
            "bytes": self.bytes,
        }


def _local_warcs(place: Place, names: list[str], staging: Path) -> list[Path]:
    """The WARC files as local paths, for the indexer: an object store's are copied into
    ``staging`` first (the indexer reads files; the ZIP is then filled from the same copies)."""
    if not isinstance(place, ObjectStore):
        return _unique(local_files(place, f"{WARC_PREFIX}*{WARC_SUFFIX}"), staging)
    paths = []
    for name in names:
        path = staging / name
        with place.open(name) as source, open(path, "wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
        paths.append(path)
    return paths


def _unique(paths: list[Path], staging: Path) -> list[Path]:
    """``paths``, each under a name of its own: its archive/ name and the index's filename.
    Two directories may hold a file of one name (a pid the host gave again to a process of
    another directory): the second is linked into ``staging`` under a numbered name."""
    named: dict[str, Path] = {}
    for path in paths:
        name, n = path.name, 1
        while name in named:
            n += 1
            name = path.name.removesuffix(WARC_SUFFIX) + f"~{n}{WARC_SUFFIX}"
        if name != path.name:
            (staging / name).symlink_to(path.absolute())
            path = staging / name
        named[name] = path
    return list(named.values())


def _add(zf: zipfile.ZipFile, path: str, source: BinaryIO) -> dict[str, Any]:
    hashed = _Hashed()
    info = zipfile.ZipInfo(path, date_time=datetime.now(timezone.utc).timetuple()[:6])
    info.compress_type = zipfile.ZIP_STORED
    with zf.open(info, "w", force_zip64=True) as sink:
        hashed.copy(source, sink)
    return hashed.resource(path)


def write(
    place: Place,
    names: list[str],
    target: Path,
    crawl_id: str,
    index_lines: int = Settings.wacz_index_lines,
) -> int:
    """Write the WACZ of the WARC files ``names`` of ``place`` to ``target``, whole or not at
    all; the number of pages in it. ``index_lines``: the most lines of a plain index
    (wacz_index.py)."""
    tmp = target.with_name(f".{target.name}.export-{os.getpid()}")
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as work:
            staging = Path(work)
            warcs = _local_warcs(place, names, staging)
            indexes = wacz_index.make(warcs, staging, index_lines)
            pages = page_lines(place)
            with open(staging / "pages.jsonl", "w", encoding="utf-8") as f:
                for line in (PAGES_HEADER, *pages):
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
            entries = [(f"archive/{w.name}", w) for w in warcs]
            entries += indexes
            entries += [("pages/pages.jsonl", staging / "pages.jsonl")]
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                resources = []
                for path, local in entries:
                    with open(local, "rb") as source:
                        resources.append(_add(zf, path, source))
                package = datapackage(crawl_id, resources)
                zf.writestr("datapackage.json", json.dumps(package, indent=2) + "\n")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return len(pages)


def datapackage(crawl_id: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "profile": "data-package",
        "wacz_version": WACZ_VERSION,
        "title": f"crawl {crawl_id}",
        "resources": resources,
        "created": _iso(time.time()),
        "software": f"crawler-tasks {__version__}",
    }
