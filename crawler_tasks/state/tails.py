"""Tails of the frontier: what a host has pending beyond its head, out of Redis.

A host's pending URLs are its head (``q:D``, the list release.lua pops), its chunks (compressed
files in the chunk store, their ids in ``ix:D``) and its spill buffer (``sp:D``); which comes
first is tails_lib.lua's header. admit.lua fills a head up to ``frontier_head`` URLs and sends
the rest to the buffer; release.lua tops a low head up from the buffer, or marks its host for a
refill. This module does the I/O that Lua may not, from the dispatcher (never on a fetch):

* flush: a full buffer's first ``frontier_chunk`` entries are written as one chunk, then swapped
  for its id in one flush.lua call; a buffer that has held entries for ``frontier_flush_seconds``
  without filling is written out whole the same way, a smaller chunk (the buffers of hosts that
  spill slowly would otherwise hold most of what Redis keeps of the frontier). The chunk's name is a digest of its host and entries, so a
  process killed between the write and the swap leaves a file that the next flush of the same
  entries writes again under the same name; the swap checks the buffer still holds them.
* refill: a host's next chunk is read and moved into its head by one refill.lua call, which
  checks the chunk is still the next one (two dispatchers, or one killed after the move and
  before the delete, never move it twice); the file is deleted after.

Each URL is in one place at a time: the head, the buffer or one indexed chunk.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from ..errors import ConfigError, ObjectMissing, StoreUnavailable
from .chunk_store import ChunkStore
from .keys import CrawlKeys, PartKeys
from .options import CrawlOptions
from .scripts import Scripts

log = logging.getLogger(__name__)

#: Seconds of fetching at its pace a host's head holds under the default rule (BUbiNG's).
HEAD_SECONDS = 300.0
#: The head of a crawl without a chunk store (chunk_store.placed): one no admission fills, so
#: nothing spills (tails_lib.lua's HEAD_UNBOUNDED, passed as an explicit size).
NO_STORE_HEAD = 10**15
#: Hosts flushed or refilled per partition in one dispatcher round: a round stays short.
TEND_BATCH = 64
#: zlib level of a chunk: 6 is within a few % of 9's size at a third of its time.
CHUNK_LEVEL = 6


def encode(entries: list[str]) -> bytes:
    """One chunk: its entries (formats.entry, never a newline in a normalised URL), one a line,
    deflated. The host's scheme and name repeat on every line and cost a few bits each."""
    return zlib.compress("\n".join(entries).encode("utf-8", "surrogateescape"), CHUNK_LEVEL)


def decode(data: bytes) -> list[str]:
    return zlib.decompress(data).decode("utf-8", "surrogateescape").split("\n")


def chunk_id(domain: str, entries: list[str]) -> str:
    """The same host and entries, the same name: a chunk written again after a kill replaces
    its first copy instead of adding one."""
    h = hashlib.blake2b(digest_size=12)
    h.update(domain.encode("utf-8", "surrogateescape") + b"\n")
    h.update("\n".join(entries).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def entries_digest(entries: list[str]) -> str:
    """What flush.lua compares the buffer with (redis.sha1hex of the same text)."""
    return hashlib.sha1("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()


def tails_args(opts: CrawlOptions, pk: PartKeys) -> list[str | int | float]:
    """The 7 arguments of tails_lib.lua's ``tails_args``, the same for admit and release."""
    rate = opts.rate
    iv = 0.0 if not rate or rate == float("inf") else 1.0 / rate
    return [
        opts.frontier_head if opts.frontier_store else NO_STORE_HEAD,
        HEAD_SECONDS,
        iv,
        opts.frontier_chunk,
        pk.spill_prefix,
        pk.index_prefix,
        pk.domain_prefix,
    ]


Point = Callable[[str], None]
#: Politeness.drain: a domain's head and buffer taken out as in flight, (depth, url) each.
Take = Callable[[str], list[tuple[int, str]]]


def _nowhere(name: str) -> None:
    """No fault point: the default of :meth:`Tails.tend`."""


@dataclass(frozen=True)
class Tended:
    flushed: int = 0  # chunks written and indexed
    refilled: int = 0  # chunks moved into heads


class Tails:
    """The flushes and refills of one crawl (the dispatcher's ``tend`` each round)."""

    def __init__(
        self, client: redis.Redis, ck: CrawlKeys, opts: CrawlOptions, scripts: Scripts
    ) -> None:
        self.client = client
        self.ck = ck
        self.opts = opts
        self.scripts = scripts
        self._store: ChunkStore | None = None
        self.dfs = opts.order == "dfs"

    @property
    def spills(self) -> bool:
        """Whether this crawl's hosts can spill at all: only with a chunk store
        (chunk_store.placed; without one tails_args gives heads no admission fills)."""
        return bool(self.opts.frontier_store)

    @property
    def store(self) -> ChunkStore:
        """Opened at its first use: a crawl that never spills never needs one."""
        if self._store is None:
            if not self.opts.frontier_store:  # options not built by store.plan (chunk_store.placed)
                raise ConfigError("this crawl's frontier_store is not set: nowhere to spill to")
            self._store = ChunkStore.of(self.opts.frontier_store, self.opts.crawl_id)
        return self._store

    def tend(self, part: int, batch: int = TEND_BATCH, point: Point = _nowhere) -> Tended:
        """Refills first (a host waiting for its next URLs), then flushes. ``point``: called
        with the name of each step between two writes (the fault suite kills a process there:
        worker/process/faults.py)."""
        pk = self.ck.parts[part]
        pipe = self.client.pipeline(transaction=False)
        pipe.srandmember(pk.low, batch)
        pipe.time()  # Redis's clock: admit.lua and flush.lua score buffers by it
        low, (sec, usec) = pipe.execute()
        due = self.client.zrangebyscore(
            pk.flush, "-inf", sec + usec / 1e6 - self.opts.frontier_flush_seconds, 0, batch, True
        )
        refilled = flushed = 0
        for d in low or []:
            refilled += self.refill(pk, _text(d), point)
        for d, score in due:
            # A buffer may hold several chunks (one big admission): all out while it does;
            # one that waited without filling (score > 0: since when) goes out whole.
            for _ in range(batch):
                done = self.flush(pk, _text(d), point, whole=score > 0)
                flushed += done
                if not done or score > 0:
                    break
        return Tended(flushed, refilled)

    def flush(self, pk: PartKeys, domain: str, point: Point = _nowhere, whole: bool = False) -> int:
        """Write the first chunk of ``domain``'s buffer and index it; 1 if indexed. ``whole``:
        the buffer is written out even if shorter than a chunk (it waited long enough)."""
        n = self.opts.frontier_chunk
        key = pk.spill(domain)
        raw = self.client.lrange(key, -n, -1) if self.dfs else self.client.lrange(key, 0, n - 1)
        entries = [_text(e) for e in raw]
        if len(entries) < n and not whole:
            entries = []  # taken since (release.lua topped the head up): flush.lua rescores it
        name = ""
        if entries:
            name = chunk_id(domain, entries)
            self.store.put(name, encode(entries))
            point("frontier_flush_written")
        result = self.scripts.flush(
            keys=[key, pk.chunks(domain), pk.spilled, pk.flush, pk.stats],
            args=[domain, name, len(entries), entries_digest(entries), int(self.dfs), n],
            client=self.client,
        )
        point("frontier_flush_swapped")
        if int(result) == 0 and name:
            # The buffer moved on and no other flush indexed this name: nothing refers to it.
            self.store.delete(name)
        return 1 if int(result) == 1 else 0

    def refill(self, pk: PartKeys, domain: str, point: Point = _nowhere) -> int:
        """Move ``domain``'s next chunk into its head; 1 if moved."""
        ref = self.client.lindex(pk.chunks(domain), 0)
        name = _text(ref) if ref else ""
        try:
            entries = decode(self.store.get(name)) if name else []
        except ObjectMissing:
            # Another dispatcher refilled this chunk between our read of the index and of the
            # chunk (moved, then deleted): nothing to do. Still first in the index, it is lost.
            if self.client.lindex(pk.chunks(domain), 0) == ref:
                raise
            return 0
        point("frontier_refill_read")
        result = self.scripts.refill(
            keys=[
                pk.queue(domain),
                pk.chunks(domain),
                pk.spilled,
                pk.low,
                pk.ready,
                pk.spill(domain),
                pk.stats,
            ],
            args=[domain, name, int(self.dfs), *entries],
            client=self.client,
        )
        point("frontier_refill_moved")
        if int(result) == 1:
            self.store.delete(name)  # killed before this: never read again (not indexed)
        return int(result)

    def drain(self, domain: str, take: Take) -> Iterator[list[tuple[int, str]]]:
        """A dead host's pending URLs taken out of the frontier, a batch at a time: its head
        and buffer (``take``: Politeness.drain, drain.lua), then each chunk moved into its head
        and taken with it. Left in the store, its chunks would be refilled only if the host was
        marked low when it died (drain.lua takes it out of the ready zset): else never, and the
        crawl never finishes."""
        pk = self.ck.for_domain(domain)
        while True:
            yield take(domain)
            if not self.spills or not self.client.llen(pk.chunks(domain)):
                return
            self.refill(pk, domain)  # 0 if another dispatcher moved it first: taken all the same

    def clear(self) -> None:
        """Every chunk of a crawl that ended (finished or cancelled: cancel.lua dropped the
        indexes, never the files) deleted; chunks a kill left unindexed too. A store that
        cannot be reached now keeps them (said in the log; ``crawler forget`` clears them)."""
        if not self.spills:
            return
        try:
            gone = self.store.clear()
        except StoreUnavailable as exc:
            log.warning("crawl %s: its frontier's chunks are left: %s", self.opts.crawl_id, exc)
            return
        if gone:
            log.info("crawl %s: %d chunks of its frontier deleted", self.opts.crawl_id, gone)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
