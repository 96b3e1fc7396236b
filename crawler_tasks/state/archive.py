"""Which WARC records of a crawl are its archived ones: one response (or revisit) record and
one conversion record per URL and crawl, whatever the number of attempts (archive_*.lua).

A URL can be fetched twice: taken back from a process that froze or died, or redelivered.
Each attempt reserves the URL's place before it appends its records and commits after; the
first attempt whose records reach the archive keeps them, later ones write none, and a writer
that lost its place while it appended truncates its append (worker/output/archive_fence.py)."""

from __future__ import annotations

import json
from typing import Any

import redis

from .formats import ArchivePlace, ArchiveSlot
from .keys import CrawlKeys, url_digest
from .scripts import Call, Scripts

#: Record kinds with a place of their own: a response or revisit (with its request record),
#: a rendered page's conversion record.
RESPONSE, CONVERSION = "r", "c"
KINDS = (RESPONSE, CONVERSION)


def field(kind: str, url: str) -> str:
    """The URL's place in its partition's ``archived`` hash: a digest, not the URL (the hash
    holds every fetched URL for the crawl's life)."""
    return kind + url_digest(url)


class Reserved:
    """archive_reserve.lua's reply: ``write``, or the archived ``rid``, or another writer's
    uncommitted ``slot`` to judge."""

    def __init__(self, write: bool, rid: str | None = None, slot: str | None = None) -> None:
        self.write, self.rid, self.slot = write, rid, slot


class Archive:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, scripts: Scripts) -> None:
        self.client, self.ck, self.scripts = client, ck, scripts

    def reserve(self, kind: str, url: str, mine: ArchiveSlot, taking: str = "") -> Reserved:
        """Reserve ``url``'s records of ``kind`` for ``mine``; ``taking``: the uncommitted
        slot of another writer, found earlier and judged not on disk, to take over."""
        call = self.reserve_call(kind, url, mine, taking)
        return reserved(call.script(keys=call.keys, args=call.args, client=self.client))

    def reserve_call(self, kind: str, url: str, mine: ArchiveSlot, taking: str = "") -> Call:
        """:meth:`reserve` as a call to send with others (its reply: :func:`reserved`)."""
        args = [field(kind, url), dumps(mine), taking]
        return Call(self.scripts.archive_reserve, [self.ck.for_url(url).archived], args)

    def commit(self, kind: str, url: str, rid: str, keep: bool = True) -> tuple[bool, str]:
        """The records ``rid`` are appended (``keep``), or their append failed: are they
        ``url``'s archived ones (else they are undone)? And what is there instead: another
        record id, another writer's reservation (formats.ArchiveSlot JSON), or ""."""
        call = self.commit_call(kind, url, rid, keep)
        return committed(call.script(keys=call.keys, args=call.args, client=self.client))

    def commit_call(self, kind: str, url: str, rid: str, keep: bool = True) -> Call:
        """:meth:`commit` as a call to send with others (its reply: :func:`committed`)."""
        args = [field(kind, url), rid, "1" if keep else "0"]
        return Call(self.scripts.archive_commit, [self.ck.for_url(url).archived], args)


def reserved(got: list[Any]) -> Reserved:
    """archive_reserve.lua's reply, read."""
    place = ArchivePlace(int(got[0]))
    value = _text(got[1]) if len(got) > 1 else None
    if place is ArchivePlace.WRITE:
        return Reserved(True)
    if place is ArchivePlace.ARCHIVED:
        return Reserved(False, rid=value)
    return Reserved(False, slot=value)


def committed(got: list[Any]) -> tuple[bool, str]:
    """archive_commit.lua's reply, read."""
    return int(got[0]) == 1, _text(got[1]) if len(got) > 1 else ""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def dumps(slot: ArchiveSlot) -> str:
    return json.dumps(slot._asdict())


def loads(raw: str) -> ArchiveSlot:
    return ArchiveSlot(**json.loads(raw))
