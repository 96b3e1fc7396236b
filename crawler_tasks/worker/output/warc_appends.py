"""Fenced appends to one process's WARC file of a crawl (``CrawlOutput._append_warc``), in one
Redis round trip each where the file is busy (issue 32).

The fence (archive_fence.py) reserves a URL's place before the append and commits after, with
the file locked from one to the other, so nothing lands after an append before its commit: a
writer that lost its place meanwhile (frozen, taken over) truncates its own append at the
file's end. Asked one after the other, that was two round trips a page, the file locked
across both. Here an append's commit is left to the next writer of the file, which sends it
with its own reservation in one round trip (``run_each``), before its own append: the order in
the file and in Redis is the one of a writer that committed its own, and a lost place is
still truncated at the file's end. The reservation's round trip also carries the calls its
fence was given (``ArchiveFence.carried``: a page's admissions, respond.py), which need no
round trip of their own. A writer whose file stays quiet commits its own after
:data:`HANDOFF_WAIT`; one that leaves the file (close, an append without a fence) settles the
last one first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.exceptions import OutOfMemoryError

from ...errors import OutputUnavailable
from ...state.archive import committed, reserved
from ...state.scripts import run_each

if TYPE_CHECKING:  # as in output.py: the fence needs the crawl's store
    from .archive_fence import ArchiveFence

#: Seconds an append waits for the next writer to ask its commit before asking it alone: a
#: page's fetch takes tens to hundreds of ms, so a busy file's next writer comes well within.
HANDOFF_WAIT = 0.02


class Unsettled:
    """An append whose commit is not asked yet; ``done`` once it is (by whichever thread)."""

    def __init__(self, fence: ArchiveFence, rid: str, name: str, at: int) -> None:
        self.fence, self.rid, self.name, self.at = fence, rid, name, at
        self.done = threading.Event()
        self.instead: str | None = None
        self.error: Exception | None = None

    def answer(self) -> str:
        """The archived records' id (this append's unless it lost its place), or the error."""
        if self.error is not None:
            raise self.error
        return self.instead or self.rid


class WarcAppends:
    """``path``, ``size``, ``append`` and ``undo``: the output's, for its WARC file; ``first(at, data)``:
    ``data`` with the file's warcinfo record before it if ``at`` is 0."""

    def __init__(
        self,
        path: Callable[[str], Path],
        size: Callable[[str], int],
        append: Callable[[list[tuple[str, bytes]]], Any],
        undo: Callable[[str, int], None],
        first: Callable[[int, bytes], bytes],
    ) -> None:
        self.path, self.size, self.append_, self.undo, self.first = (
            path,
            size,
            append,
            undo,
            first,
        )
        self.lock = threading.Lock()
        self.unsettled: Unsettled | None = None

    def append(self, name: str, data: bytes, rid: str, fence: ArchiveFence | None) -> str:
        """Append the records ``rid`` (``data``) unless the URL's are archived already; the
        archived records' id (see ``CrawlOutput._append_warc``)."""
        with self.lock:
            if fence is None:  # nothing lands after an append not yet committed
                self.settle_last()
                self.append_([(name, self.first(self.size(name), data))])
                return rid
            archived, at, data = self._reserve(name, data, rid, fence)
            if archived is not None:
                return archived
            try:
                self.append_([(name, data)])
            except OutputUnavailable:
                fence.commit(rid, keep=False)  # the place is free for the next attempt
                raise
            mine = self.unsettled = Unsettled(fence, rid, name, at)
        return self._wait(mine)

    def settle_last(self) -> None:
        """The last append's commit, asked alone (with the lock held)."""
        last, self.unsettled = self.unsettled, None
        if last is not None:
            self._settle(last, None)

    def _reserve(
        self, name: str, data: bytes, rid: str, fence: ArchiveFence
    ) -> tuple[str | None, int, bytes]:
        """fence.reserve, with the last append's commit and the fence's carried calls in its
        round trip; the records' new place and bytes if that append lost its place (and was
        undone)."""
        before, self.unsettled = self.unsettled, None
        at = self.size(name)
        path = self.path(name)  # the file as it is now (its segment's: files.py)
        carried = fence.carried.take() if fence.carried is not None else []
        if before is None and not carried:
            return fence.reserve(path, at, rid), at, self.first(at, data)
        calls = [before.fence.commit_call(before.rid)] if before is not None else []
        calls += [fence.reserve_call(path, at, rid), *carried]
        try:
            replies = run_each(fence.client, calls)
        except Exception:
            self.unsettled = before  # asked again, by the next writer or its own (idempotent)
            raise
        if carried:
            assert fence.carried is not None
            fence.carried.replies(replies[len(calls) - len(carried) :])
        mine = replies[len(calls) - len(carried) - 1]
        first = None if isinstance(mine, Exception) else reserved(mine)
        if before is not None and self._settle(before, replies[0]):
            # Undone: this append goes where that one began.
            if first is not None and first.write:
                fence.commit(rid, keep=False)  # the reservation named the wrong place
            first = None  # asked again
        at = self.size(name)
        return fence.reserve(path, at, rid, first), at, self.first(at, data)

    def _settle(self, last: Unsettled, reply: Any) -> bool:
        """``last``'s commit from ``reply`` (None or refused for memory: asked alone, with the
        fence's patience); its append undone if it lost its place (True)."""
        try:
            if isinstance(reply, Exception) and not isinstance(reply, OutOfMemoryError):
                raise reply
            if reply is None or isinstance(reply, Exception):
                last.instead = last.fence.commit(last.rid)
            else:
                last.instead = last.fence.committed(last.rid, committed(reply))
        except Exception as exc:  # its writer raises it, as when it asked its own commit
            last.error = exc
        if last.instead is not None:  # lost its place while appending (frozen): undone
            self.undo(last.name, last.at)
        last.done.set()
        return last.instead is not None

    def _wait(self, mine: Unsettled) -> str:
        """``mine``'s answer once its commit is asked: by the next writer, else here."""
        settled(mine, self)
        return mine.answer()


def settled(mine: Any, appends: Any) -> None:
    """Wait until ``mine`` (an append of ``appends``: WarcAppends, PageAppends) has its
    commit asked: by the next writer, else, after :data:`HANDOFF_WAIT`, here (alone)."""
    while not mine.done.wait(HANDOFF_WAIT):
        with appends.lock:
            if appends.unsettled is mine:
                appends.settle_last()
