"""Which crawls' tails this process's dispatcher may flush and refill (issue 49).

A crawl whose chunk store is a directory that this machine does not share with the machine
that first tended it (state/store_mark.py) is refused here with one ERROR line, once per crawl
and process, and its tails are left alone: flushing would write chunks where the other
machines' dispatchers cannot read them, and refilling would find the chunks missing. The rest
of the crawl's work goes on here (fetches, parses, admissions and releases touch no chunk), so
the crawl still finishes as long as a dispatcher of the machine that holds the directory runs;
an s3:// store, or a directory every machine mounts, is never refused.

Why not refuse at ``crawler crawl``: the start cannot tell a shared directory (NFS) from a
local one, and machines join a running crawl; only a machine that looks for the mark knows.
"""

from __future__ import annotations

import logging
import socket
import time

from ...state import store_mark
from ...state.store import CrawlStore

log = logging.getLogger(__name__)

#: Seconds before a refused crawl is tested again (a directory mounted since is then used).
RECHECK_EVERY = 60.0


class TailsGuard:
    """One dispatcher's answers, by crawl: tested at a crawl's first round here, kept while
    the crawl is shared, tested again every :data:`RECHECK_EVERY` s while it is not."""

    def __init__(self, host: str = "") -> None:
        #: This machine's name in the mark's claim (tests give another machine's).
        self.host = host or socket.gethostname()
        self._refused: dict[str, float] = {}  # crawl id -> when last tested
        self._shared: set[str] = set()

    def may_tend(self, store: CrawlStore) -> bool:
        tails = store.frontier.tails
        if store.id in self._shared or not store_mark.local(tails.opts.frontier_store):
            return True
        tested = self._refused.get(store.id)
        if tested is not None and time.monotonic() - tested < RECHECK_EVERY:
            return False
        seen = store_mark.seen_here(store.client, store.ck.store_mark, tails.store, self.host)
        if seen.shared:
            self._shared.add(store.id)
            self._refused.pop(store.id, None)
            return True
        if tested is None:
            log.error(
                "crawl %s: its chunk store %s is a directory this machine (%s) does not share "
                "with %s (a tail written on one host cannot be read on another): its tails are "
                "not tended here; give it an s3://BUCKET/PREFIX or a directory every machine "
                "mounts",
                store.id,
                tails.opts.frontier_store,
                self.host,
                seen.writer or "the machine that first tended it",
            )
        self._refused[store.id] = time.monotonic()
        return False
