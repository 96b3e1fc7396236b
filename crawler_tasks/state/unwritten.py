"""A crawl's unwritten records: what finish.lua stored for a final URL until its record is on
disk (``CrawlKeys.unwritten``, :class:`~.formats.Unwritten`), and the fence that lets exactly
one writer append it. The writer that finished the URL commits its append (commit.lua) and
deletes the entry; a sweep that finds an entry left by a dead or frozen writer claims it
(claim.lua) and writes it instead, and commit.lua tells the late writer to undo its copy.
"""

from __future__ import annotations

import time

import redis

from . import formats
from .keys import CrawlKeys
from .ledger import scan_parts
from .scripts import Call, Scripts


class UnwrittenRecords:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, scripts: Scripts) -> None:
        self.client = client
        self.ck = ck
        self.scripts = scripts

    def get(self, url: str) -> formats.Unwritten | None:
        """``url``'s entry: its record, finished, not yet on disk; None once written."""
        raw = self.client.hget(self.ck.for_url(url).unwritten, url)
        return None if raw is None else formats.Unwritten.loads(raw)

    def claim(self, url: str, read: formats.Unwritten, claimed: formats.Unwritten) -> bool:
        """claim.lua: take over the unwritten record ``read`` as ``claimed`` (this process's
        file, now); False if it was written or claimed by another process meanwhile."""
        pk = self.ck.for_url(url)
        args = [url, read.rid, repr(read.ts), claimed.dumps(), claimed.fence()]
        return bool(
            self.scripts.claim(keys=[pk.unwritten, pk.fenced], args=args, client=self.client)
        )

    def commit(self, url: str, mine: formats.Unwritten) -> formats.Committed:
        """commit.lua: the record ``mine`` is appended to its file; keep it, or undo it."""
        return formats.Committed(int(self.commit_call(url, mine).run(self.client)))

    def commit_call(self, url: str, mine: formats.Unwritten) -> Call:
        """:meth:`commit`, to send with other calls (its reply: ``formats.Committed``)."""
        pk = self.ck.for_url(url)
        args = [url, mine.head(), mine.fence()]
        return Call(self.scripts.commit, [pk.unwritten, pk.fenced], args)

    def written(self, url: str) -> None:
        """``url``'s record is on disk."""
        self.client.hdel(self.ck.for_url(url).unwritten, url)

    def orphans(self, older_than: float) -> tuple[list[tuple[str, formats.Unwritten]], int]:
        """Unwritten records finished more than ``older_than`` s ago (their writer died, or is
        frozen), and how many younger ones there are (writers about to finish)."""
        limit, old, young = time.time() - older_than, [], 0
        for url, raw in scan_parts(self.client, self.ck, "unwritten"):
            entry = formats.Unwritten.loads(raw)
            if entry.ts < limit:
                old.append((url.decode("utf-8", "surrogateescape"), entry))
            else:
                young += 1
        return old, young
