"""Crawl output on disk, under ``<output>/<crawl_id>/``.

Every worker process writes its own files, named ``<kind>-<host>-<pid>.*``, so concurrent
workers never interleave records and no file needs a cross-process lock:

* ``pages-*.jsonl``  one JSON object per URL that reached a final state
* ``items-*.jsonl``  the crawl's extraction hook's items, one per line:
  ``{"url": page URL, "item": {...}, "rid": the page record's rid}``
* ``edges-*.tsv``    one ``from<TAB>to`` line per outlink
* ``crawl-*.warc.gz`` WARC/1.1, a ``warcinfo`` record first, then request + response records of
  every fetched URL, or request + ``revisit`` records in a recrawl (worker/output/revisits.py) (warcio);
  a response keeps a gzip or deflate body as it came (warc.py)
* ``summary.json``   written once, by the worker that finishes the crawl

Records are flushed as they are written. A record is written after finish.lua has accepted the
URL's final state and kept the record in Redis until it is on disk (see ``recorder.py``), so
every URL of a finished crawl has exactly one record, also when a process dies on the way.
``edges-*.tsv`` is derived from the records' outlinks and may repeat a URL's edges after such
a death; ``pages-*.jsonl`` is the exact record.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders

from ...state.scripts import Call
from .appends import AppendFiles
from .page_appends import PageAppends, PendingPage
from .segments import Segmenting
from .warc import http_headers, record_bytes, request_target, warcinfo, with_payload, writer
from .warc_appends import WarcAppends

if TYPE_CHECKING:  # a URL's place in the crawl's archive (needs the crawl's store)
    from .archive_fence import ArchiveFence as Fence

#: Key of a record's items while it waits to be written (recorder.py); not in the page line,
#: which has their number as ``items``.
ITEMS = "_items"


class CrawlOutput:
    """Files of one crawl for this process; thread-safe (the threads pool shares it).

    Each record goes to its files whole or not at all (:class:`~.appends.AppendFiles`): after
    a failed write (a full disk, a quota, an I/O error) every file the record touched is
    truncated back to where it ended before, so a reader never meets half a record and the
    next record does not land on a cut one. The failure is raised as
    :class:`OutputUnavailable`."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        tag: str,
        gzip_level: int = 1,
        info: dict[str, str] | None = None,
        segmenting: Segmenting | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.tag = tag
        self.gzip_level = gzip_level  # Settings.warc_gzip_level
        #: The fields of the warcinfo record each WARC file begins with (warcinfo_fields).
        self.info = info or {}
        self._lock = threading.Lock()
        #: The appends themselves, each whole or not at all (appends.py), under ``_lock``.
        self.files = AppendFiles(self.dir, segmenting)
        #: An s3:// crawl's segments (segments.py); None for local output.
        self.segmenting = segmenting
        #: The WARC file's appends, with a lock of their own (the archive's fence waits on
        #: Redis; so do the pages files', under ``_lock``: page_appends.py).
        self._warc = WarcAppends(
            self.files.path, self.files.size, self.files.append, self.files.undo, self._first
        )
        #: The pages files' appends whose commit rides with the next finish (same lock).
        self.pages = PageAppends(self._lock, self.files.undo)

    @property
    def pages_path(self) -> Path:
        return self.dir / f"pages-{self.tag}.jsonl"

    def final(
        self,
        record: dict[str, Any],
        with_items: bool = True,
        commit: Callable[[], bool] | None = None,
    ) -> bool:
        """A URL's page record, its items and its edges; False if ``commit``, asked just after
        the append, says another process took the record over meanwhile (this one was frozen
        before or during the append: the record is on disk elsewhere), and the append is then
        undone. Asked after, not before: a check before the append leaves a window in which
        a process can be frozen and append later. (recorder.py's own records carry their
        commit in the next page's finish instead: page_appends.py.)"""
        writes = self.page_writes(record, with_items)
        with self._lock:  # no other thread appends until the copy is kept or undone
            self.pages.settle_last()
            done = self.files.append(writes)
            if commit is not None and not commit():
                for name, size in done:
                    self.files.undo(name, size)
                return False
        return True

    def page_writes(
        self, record: dict[str, Any], with_items: bool = True, text: str | None = None
    ) -> list[tuple[str, bytes]]:
        """What :meth:`final` appends, file by file. Items and edges first: the page line
        is what says the record is on disk (see recorder.py), so a crash between them repeats
        edges, never loses them; items carry the record's rid, so the writer of an orphan
        sees they are there and leaves them (``with_items=False``). ``text``: page_text of
        ``record`` if the caller has it (a record without items)."""
        record = dict(record)
        items = record.pop(ITEMS, None) or ()
        line = (text or page_text(record)) + "\n"
        edges = "".join(f"{record['url']}\t{t}\n" for t in record.get("outlinks") or ())
        writes = []
        if items and with_items:
            # One write: a page's item lines are there together or not at all (save a
            # write cut by the death of the process, which the reader skips: read_items).
            lines = "".join(_item_line(record, item) for item in items)
            writes.append((items_path(self.pages_path).name, _utf8(lines)))
        if edges:
            writes.append((f"edges-{self.tag}.tsv", _utf8(edges)))
        writes.append((self.pages_path.name, _utf8(line)))
        return writes

    def final_carried(
        self, writes: list[tuple[str, bytes]], call: Call, client: redis.Redis
    ) -> PendingPage:
        """:meth:`final` of ``page_writes`` with ``self.pages.lock`` held by the caller, its
        commit (``call``) left to the next writer (page_appends.py)."""
        return self.pages.leave(self.files.append(writes), call, client)

    def warc(
        self,
        url: str,
        status: int,
        reason: str,
        headers: list[tuple[str, str]],
        body: bytes,
        request_headers: list[tuple[str, str]],
        http_version: str = "HTTP/1.1",
        ip: str | None = None,
        warc_headers: dict[str, str] | None = None,
        fence: Fence | None = None,
        coded: bool = False,
    ) -> str:
        """Append a response record and its request record; returns the response's
        WARC-Record-ID (a rendered page's conversion record refers to it). ``warc_headers``:
        more WARC headers (a recrawl gives the WARC-Date and WARC-Payload-Digest it keeps).
        ``coded``: ``body`` is as received, in the coding its Content-Encoding header names
        (``Response.archived``), and its record is stored, not deflated again (warc.py)."""
        http = http_headers(f"{status} {reason}", headers, len(body), http_version, coded)
        extra = {"WARC-IP-Address": ip} if ip else {}
        resp = with_payload(
            url,
            "response",
            body,
            http_headers=http,
            warc_headers_dict={**extra, **(warc_headers or {})},
        )
        level = 0 if coded else self.gzip_level
        return self._with_request(resp, request_headers, http_version, fence, level)

    def _with_request(
        self,
        record: ArcWarcRecord,
        request_headers: list[tuple[str, str]],
        http_version: str,
        fence: Fence | None,
        level: int,
    ) -> str:
        """Append ``record`` (deflated at ``level``) after the request record concurrent to
        it; its WARC-Record-ID."""
        # Records are built and compressed outside the lock; one gzip member per record (the
        # WARC convention) at Settings.warc_gzip_level, not warcio's 9 (~3x level 6's CPU for
        # ~5 % less size).
        url = record.rec_headers.get_header("WARC-Target-URI")
        req_http = StatusAndHeaders(
            f"GET {request_target(url)} {http_version}", request_headers, is_http_request=True
        )
        req = writer().create_warc_record(url, "request", http_headers=req_http)
        rid = str(record.rec_headers.get_header("WARC-Record-ID"))
        req.rec_headers.add_header("WARC-Concurrent-To", rid)
        data = record_bytes(req, self.gzip_level) + record_bytes(record, level)
        return self._append_warc(data, rid, fence)

    def revisit(
        self,
        url: str,
        profile: str,
        refers_to: tuple[str, str, str],
        http: StatusAndHeaders,
        request_headers: list[tuple[str, str]],
        ip: str | None = None,
        fence: Fence | None = None,
    ) -> str:
        """Append a ``revisit`` record (WARC 1.1 6.7) and its request record: ``profile`` one
        of the REVISIT_* profiles, ``refers_to`` the earlier capture's (payload digest,
        WARC-Target-URI, WARC-Date); ``http`` the response's headers, without a body. Its
        WARC-Record-ID. Through the same append as a response (``_append_warc``)."""
        digest, uri, date = refers_to
        extra = {"WARC-IP-Address": ip} if ip else {}
        record = writer().create_revisit_record(
            url, digest, uri, date, http_headers=http, warc_headers_dict=extra
        )
        record.rec_headers.replace_header("WARC-Profile", profile)
        return self._with_request(record, request_headers, http.protocol, fence, self.gzip_level)

    def conversion(
        self, url: str, html: str, refers_to: str | None, fence: Fence | None = None
    ) -> str:
        """A rendered page's DOM, as a ``conversion`` record of the response it came from;
        its WARC-Record-ID (or that of the one archived before, see ``_append_warc``)."""
        extra = {"WARC-Refers-To": refers_to} if refers_to else {}
        record = with_payload(
            url,
            "conversion",
            _utf8(html),
            warc_content_type="text/html; charset=utf-8",
            warc_headers_dict=extra,
        )
        rid = str(record.rec_headers.get_header("WARC-Record-ID"))
        return self._append_warc(record_bytes(record, self.gzip_level), rid, fence)

    def _append_warc(self, data: bytes, rid: str, fence: Fence | None = None) -> str:
        """Every WARC record's way to this process's WARC file: a file begins with its
        warcinfo record, appended with the first record (together or not at all). ``fence``
        (archive_fence.py): records archived first by another attempt are not written, an
        append that lost its place meanwhile is undone; returns the archived records' id."""
        return self._warc.append(f"crawl-{self.tag}.warc.gz", data, rid, fence)

    def _first(self, at: int, data: bytes) -> bytes:
        """``data`` with the warcinfo record before it if it begins the file (``at`` 0)."""
        if at:
            return data
        name = f"crawl-{self.tag}.warc.gz"
        return record_bytes(warcinfo(name, self.info), self.gzip_level) + data

    def close(self) -> None:
        with self._lock, self._warc.lock:
            self._warc.settle_last()  # its writer hears the answer (warc_appends.py)
            self.pages.settle_last()
            self.files.close()

    def written(self) -> dict[str, int]:
        """:meth:`~.appends.AppendFiles.written` (the uploader's look at this output)."""
        return self.files.written()


def page_text(record: dict[str, Any]) -> str:
    """A page record's line, without its newline: the same JSON as the record in its
    unwritten entry (formats.Unwritten), so one encoding serves both."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def items_path(pages_path: Path) -> Path:
    """The items file beside a pages file (same writer)."""
    return pages_path.with_name("items-" + pages_path.name.removeprefix("pages-"))


def _item_line(record: dict[str, Any], item: dict[str, Any]) -> str:
    value = {"url": record["url"], "item": item, "rid": record["rid"]}
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def process_tag() -> str:
    """This process among all workers' (file names, heartbeats, inflight marks): "host-pid"."""
    return f"{socket.gethostname()}-{os.getpid()}"


def write_summary(directory: str | os.PathLike[str], summary: dict[str, Any]) -> Path:
    """Write ``summary.json`` whole; its absolute path (status shows it on any host)."""
    path = Path(directory).resolve()
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".summary.json.{os.getpid()}"
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", "utf-8")
    os.replace(tmp, path / "summary.json")  # readers never see half a file
    return path / "summary.json"
