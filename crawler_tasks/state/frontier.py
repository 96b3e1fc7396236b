"""The frontier: URLs admitted to a crawl and not yet released for fetching.

Pending URLs do not sit in the broker (a queued Celery message is ~1.2 KB in Redis). They wait
in one Redis list per domain as ``"depth|url"`` strings (FIFO for breadth-first, LIFO for
depth-first), and the dispatcher in every worker releases them as fetch tasks only when their
domain may be fetched (release.lua). The broker therefore holds at most about
``active domains x concurrency`` fetch messages, whatever the backlog.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from ..web.urls import domain_key
from . import formats
from .bloom import KnownURLs, url_hash
from .keys import CrawlKeys
from .options import CrawlOptions
from .scripts import Scripts

#: URLs per admit.lua call: keeps each script run short (Redis is single-threaded).
ADMIT_CHUNK = 1000


@dataclass
class Admitted:
    admitted: int = 0
    duplicates: int = 0
    over_limit: int = 0

    def __iadd__(self, other: list[int]) -> Admitted:
        self.admitted += int(other[0])
        self.duplicates += int(other[1])
        self.over_limit += int(other[2])
        return self


@dataclass(frozen=True)
class Release:
    """Entries handed out by one release.lua call."""

    cancelled: bool
    entries: list[tuple[str, int, str]]  # (domain, depth, url)
    #: The crawl is empty and waiting for its finisher (nothing was released).
    finishing: bool = False


class Frontier:
    """One crawl's frontier: admission of vetted URLs (admit.lua) and their release by the
    dispatcher (release.lua)."""

    def __init__(
        self,
        client: redis.Redis,
        ck: CrawlKeys,
        opts: CrawlOptions,
        scripts: Scripts,
        known: KnownURLs | None = None,
    ) -> None:
        self.client = client
        self.ck = ck
        self.opts = opts
        self.scripts = scripts
        self.shape = opts.bloom
        #: This process's memory of URLs the crawl's filter holds (None: remember nothing).
        self.known = known

    def domain_of(self, url: str) -> str:
        return domain_key(url, self.opts.domain_key)

    def admit(self, links: Iterable[tuple[str, int]], force: bool = False) -> Admitted:
        """Admit ``(normalised url, depth)`` pairs that passed the scope check."""
        total = Admitted()
        batch: list[tuple[str, str, str]] = []
        for url, depth in links:
            batch.append((self.domain_of(url), formats.entry(depth, url), url))
            if len(batch) >= ADMIT_CHUNK:
                total += self._admit(batch, force)
                batch = []
        if batch:
            total += self._admit(batch, force)
        return total

    def _admit(self, batch: list[tuple[str, str, str]], force: bool) -> list[int]:
        ck = self.ck
        # URLs this process already saw in the filter are duplicates without asking Redis.
        known = None if force else self.known
        hashes, skipped = None, 0
        if known is not None:
            batch, hashes, skipped = known.split(batch)
        if hashes is None:
            hashes = [url_hash(url) for _, _, url in batch]
        call = formats.AdmitCall(
            max_pages=self.opts.max_pages,
            k=self.shape.k,
            queue_prefix=ck.queue_prefix,
            dfs=self.opts.order == "dfs",
            shards=self.shape.shards,
            force=force,
            shard_bits=self.shape.shard_bits,
            packed_hashes=self.shape.pack(hashes),
            known=skipped,
        )
        keys = [ck.outstanding, ck.stats, ck.ready]
        keys += [ck.bloom(i) for i in range(self.shape.shards)]
        args = call.args([(domain, value) for domain, value, _ in batch])
        result: list[int] = self.scripts.admit(keys=keys, args=args, client=self.client)
        if known is not None and hashes and int(result[2]) == 0:
            known.remember(hashes)  # each one admitted or a duplicate: its bits are set
        return result

    def release(
        self,
        limit: int,
        lease_seconds: float,
        worker: str = "",
        drain: int = 1000,
        budget: int | None = None,
        cluster_rates: str = "",
    ) -> Release:
        """Up to ``budget`` due entries (None: no cap) from at most ``limit`` domains;
        ``cluster_rates`` is ``politeness.cluster_rates()``."""
        ck = self.ck
        opts = self.opts
        out = self.scripts.release(
            keys=[ck.ready, ck.inflight, ck.state, ck.rates, ck.stats, ck.retry],
            args=[
                limit,
                ck.queue_prefix,
                ck.lease_prefix,
                ck.domain_prefix,
                lease_seconds,
                "inf" if opts.rate == float("inf") else opts.rate,
                opts.burst,
                opts.concurrency,
                drain,
                worker,
                "inf" if budget is None else budget,
                cluster_rates,
            ],
            client=self.client,
        )
        mode = _text(out[0])
        entries = []
        for i in range(1, len(out), 2):
            depth, url = formats.parse_entry(_text(out[i + 1]))
            entries.append((_text(out[i]), depth, url))
        return Release(mode == "cancel", entries, mode == "finishing")

    def backlog(self, top: int = 10) -> list[tuple[str, int]]:
        """Domains with the most pending URLs (scans at most 1,000 ready domains)."""
        domains = [_text(d) for d in self.client.zrange(self.ck.ready, 0, 999)]
        pipe = self.client.pipeline(transaction=False)
        for d in domains:
            pipe.llen(self.ck.queue(d))
        sizes = pipe.execute()
        return sorted(zip(domains, sizes, strict=True), key=lambda x: -x[1])[:top]


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
