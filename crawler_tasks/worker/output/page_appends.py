"""A page record's commit carried by the next page's finish, in one Redis round trip (issue 32).

recorder.py: finish.lua keeps a URL's record in Redis as unwritten; its writer appends the
record to this process's pages file, then asks commit.lua whether the copy counts (a process
that took the record over meanwhile fenced it) and truncates it if not, with nothing
appended after it in between. Asked alone, that was a round trip a page, the file locked
across it. Here an append's commit is left to the next writer of the file, which sends it
first in its own finish's round trip (with the lease's done.lua and finish.lua, ``run_each``)
and holds the file from before that round trip to its own append: the copy asked about is
still the last one in the file when its answer comes, so a copy taken over is still truncated
at the file's end. A writer whose file stays quiet asks its own commit after
:data:`HANDOFF_WAIT`; any other append (an orphan's record) and ``close`` settle the last one
first. The same scheme as warc_appends.py, for the archive's fence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import OutOfMemoryError

from ...state.formats import Committed
from ...state.scripts import Call
from .warc_appends import HANDOFF_WAIT, settled

__all__ = ["HANDOFF_WAIT", "PageAppends", "PendingPage"]


class PendingPage:
    """An appended page record whose commit is not asked yet; ``done`` once it is."""

    def __init__(self, call: Call, client: redis.Redis, sizes: list[tuple[str, int]]) -> None:
        #: ``call``: its commit.lua, carried by the next finish or asked alone on ``client``.
        self.call, self.client, self.sizes = call, client, sizes
        self.done = threading.Event()
        self.kept = False
        self.error: Exception | None = None

    def answer(self) -> bool:
        """True if the copy counts; False if it was taken over (and undone); or the error."""
        if self.error is not None:
            raise self.error
        return self.kept


class PageAppends:
    """The last page append of one crawl's output whose commit is not asked yet, under the
    output's lock (``lock``); ``undo(name, size)`` truncates a file back."""

    def __init__(self, lock: threading.Lock, undo: Callable[[str, int], None]) -> None:
        self.lock, self.undo = lock, undo
        self.unsettled: PendingPage | None = None

    def take(self) -> PendingPage | None:
        """The last append, for the caller (holding the lock) to carry its commit."""
        last, self.unsettled = self.unsettled, None
        return last

    def leave(self, sizes: list[tuple[str, int]], call: Call, client: redis.Redis) -> PendingPage:
        """With the lock held, right after an append (``sizes``: each file's size before)."""
        mine = self.unsettled = PendingPage(call, client, sizes)
        return mine

    def settle(self, last: PendingPage, reply: Any) -> None:
        """``last``'s commit from the carried ``reply`` (None, or refused for memory: asked
        alone); its append undone if the record was taken over. The lock is held."""
        try:
            if isinstance(reply, Exception) and not isinstance(reply, OutOfMemoryError):
                raise reply
            if reply is None or isinstance(reply, Exception):
                reply = last.call.run(last.client)
            last.kept = Committed(int(reply)) is not Committed.MOVED
        except Exception as exc:  # its writer raises it, as when it asked its own commit
            last.error = exc
        if not last.kept and last.error is None:
            for name, size in last.sizes:
                self.undo(name, size)
        last.done.set()

    def settle_last(self) -> None:
        """The last append's commit, asked alone (with the lock held)."""
        last = self.take()
        if last is not None:
            self.settle(last, None)

    def wait(self, mine: PendingPage) -> bool:
        """``mine``'s answer once its commit is asked: by the next writer, else here."""
        settled(mine, self)
        return mine.answer()
