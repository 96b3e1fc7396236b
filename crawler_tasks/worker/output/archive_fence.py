"""One URL's WARC records per crawl (state/archive.py): the fence a WARC append goes through
(``CrawlOutput._append_warc``). An attempt reserves the URL's place before it appends and
commits after, with its WARC file locked throughout; the first attempt whose records reach the
archive keeps them, and a later one writes none (its page record is still the one of the
attempt that ends the URL: the archive keeps the first capture, the records the last).

A reservation whose writer never committed (it died, or is frozen, between the two) is judged
by its file: grown past the size it had at the reservation, the records are there and are
adopted; not grown, the place is taken over, and the frozen writer, if it wakes, truncates
its append. A file on another host cannot be read from here: its place is taken over (two
copies if that writer died after its append, before its commit).

An s3:// crawl's segment may have left the staging directory (uploaded, then deleted there):
its size is the one its upload recorded in Redis (state/segments.py), noted after the PUT and
before the delete, so a segment of this host is always found in one of the two. The store is
never asked for it: while the store is down that was a guess, and a dead writer's records,
uploaded, were judged not there and written a second time. Only another host's segment not
recorded as uploaded is asked of the store (its PUT answered, its note not written yet)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import OutOfMemoryError

from ...errors import AdmissionPaused, StoreUnavailable
from ...state import archive, objects
from ...state.archive import Archive, Reserved
from ...state.formats import ArchiveSlot
from ...state.scripts import Call, Carried
from ...state.segments import Segments
from ...state.store import CrawlStore

#: Rounds of reserve / judge before writing anyway (each round another writer came between).
_ROUNDS = 5


class ArchiveFence:
    """``patience``: this process's Context.room.patience. While Redis refuses writes for
    memory, the fence's writes wait in place for up to that (admission_wait), as a page's
    links do; then
    AdmissionPaused hands the URL back (nothing of it written), never a failed fetch."""

    def __init__(self, store: CrawlStore, url: str, kind: str, patience: float) -> None:
        self.archive = Archive(_Patient(store.client, patience), store.ck, store.ledger.scripts)
        self.url, self.kind = url, kind
        self.output = store.opts.output  # an s3:// crawl's files may be uploaded already
        self.store = store
        #: Calls the reservation's round trip carries along (a page's admissions: respond.py).
        self.carried: Carried | None = None

    def reserve(self, path: Path, at: int, rid: str, got: Reserved | None = None) -> str | None:
        """Before appending the records ``rid`` at ``at`` bytes of ``path``: None to append
        them, or the id of the URL's records already archived (append nothing). ``got``: the
        reply of a reservation already sent (:meth:`reserve_call`), else one is sent here."""
        mine = ArchiveSlot(rid, str(path), at)
        if got is None:
            got = self.archive.reserve(self.kind, self.url, mine)
        for _ in range(_ROUNDS):
            if got.write:
                return None
            if got.rid is not None:
                return got.rid
            other = archive.loads(got.slot or "")
            # Grown: its writer died or froze after its append.
            if _grown(other, self.output, self._segments()):
                kept, _ = self.archive.commit(self.kind, self.url, other.rid)
                if kept:
                    return other.rid
                got = self.archive.reserve(self.kind, self.url, mine)
            else:
                got = self.archive.reserve(self.kind, self.url, mine, taking=got.slot or "")
        return None  # the commit decides

    def _segments(self) -> Segments | None:
        """Where an s3:// crawl's uploads are recorded (asked only when a writer is judged)."""
        if not objects.is_url(self.output):
            return None
        return Segments(self.store.client, self.store.r.keys, self.store.id)

    def reserve_call(self, path: Path, at: int, rid: str) -> Call:
        """The first reservation of :meth:`reserve`, to send with other calls."""
        return self.archive.reserve_call(self.kind, self.url, ArchiveSlot(rid, str(path), at))

    def commit(self, rid: str, keep: bool = True) -> str | None:
        """After the append of ``rid`` (``keep``) or its failure: None if they are the URL's
        archived records, else the id of the ones that are (undo the append)."""
        return self.committed(rid, self.archive.commit(self.kind, self.url, rid, keep))

    def commit_call(self, rid: str) -> Call:
        """:meth:`commit` after an append, to send with other calls (its reply:
        :meth:`committed` of ``archive.committed``)."""
        return self.archive.commit_call(self.kind, self.url, rid)

    def committed(self, rid: str, got: tuple[bool, str]) -> str | None:
        """:meth:`commit`'s answer from archive_commit.lua's reply ``got``."""
        kept, instead = got
        if kept:
            return None
        if instead.startswith("{"):
            return archive.loads(instead).rid
        return instead or rid

    @property
    def client(self) -> Any:
        """The patient client the fence's calls go through (for calls sent together)."""
        return self.archive.client


def _grown(slot: ArchiveSlot, output: str = "", segments: Segments | None = None) -> bool:
    """Is ``slot``'s file on this host and longer than when it was reserved? An s3:// crawl's
    segment (``output``, its uploads recorded in ``segments``) that is no longer staged is
    judged by the size its upload recorded, from any host; see the module's docstring."""
    path = Path(slot.path)
    uploaded = objects.is_url(output)
    here = f"-{socket.gethostname()}-" in path.name
    if not here and not uploaded:
        return False
    try:
        return path.stat().st_size > slot.at
    except OSError:
        pass
    if not uploaded:
        return False
    size = segments.uploaded_size(path.name) if segments is not None else None
    if size is not None or here:  # this host's, neither staged nor uploaded: never written
        return size is not None and size > slot.at
    try:
        return objects.store_for(output).child(path.parent.name).size(path.name) > slot.at
    except StoreUnavailable:  # not uploaded (or the store away): as a file not grown
        return False


class _Patient:
    """A client whose calls are sent again while Redis refuses them for memory (a refused
    script did nothing), for up to ``patience`` seconds in all."""

    def __init__(self, client: redis.Redis, patience: float) -> None:
        self._client, self._deadline = client, time.monotonic() + patience

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def patiently(*args: Any, **kwargs: Any) -> Any:
            delay = 0.05
            while True:
                try:
                    return attr(*args, **kwargs)
                except OutOfMemoryError:
                    if time.monotonic() >= self._deadline:
                        raise AdmissionPaused("no room in Redis for the WARC records") from None
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)

        return patiently
