"""The frontier: URLs admitted to a crawl and not yet released for fetching.

Pending URLs do not sit in the broker (a queued Celery message is ~1.2 KB in Redis). They wait
in one Redis list per domain as ``"depth|url"`` strings (FIFO for breadth-first, LIFO for
depth-first), and the dispatcher in every worker releases them as fetch tasks only when their
domain may be fetched (release.lua). The broker therefore holds at most about
``active domains x concurrency`` fetch messages, whatever the backlog.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple

import redis

from ..web.urls import domain_key
from . import calls, formats
from .bloom import KnownURLs, url_hash
from .crawl_rates import CrawlRates
from .keys import CrawlKeys
from .options import CrawlOptions
from .pacing import address_limits
from .scripts import Call, Carried, Scripts
from .tails import Tails, tails_args

#: URLs per admit.lua call: keeps each script run short (Redis is single-threaded).
ADMIT_CHUNK = 1000
#: Pending URLs of a cancelled crawl one cancel.lua call counts cancelled at most: a few ms
#: of Redis (bench/cancel.py), so another crawl's releases go on between two calls.
CANCEL_BATCH = 10_000


@dataclass
class Admitted:
    admitted: int = 0
    duplicates: int = 0
    over_limit: int = 0
    disallowed: int = 0  # new URLs robots.txt disallows: marked seen, never queued

    def __iadd__(self, other: list[int]) -> Admitted:
        self.admitted += int(other[0])
        self.duplicates += int(other[1])
        self.over_limit += int(other[2])
        self.disallowed += int(other[3])
        return self


@dataclass(frozen=True)
class Release:
    """Entries handed out by one release.lua call."""

    entries: list[tuple[str, int, str]]  # (domain, depth, url)
    #: Domains whose server address is asked for before they are released (state/pacing.py).
    resolve: list[str] = field(default_factory=list)


class Cancelled(NamedTuple):
    """What one cancel.lua call did: URLs counted cancelled, and those of the partition still
    outstanding (0: check whether the crawl is drained)."""

    counted: int
    left: int


class Frontier:
    """One crawl's frontier: admission of vetted URLs (admit.lua, per partition) and their
    release by the dispatcher (release.lua, per partition)."""

    def __init__(
        self,
        client: redis.Redis,
        ck: CrawlKeys,
        opts: CrawlOptions,
        scripts: Scripts,
        known: KnownURLs | None = None,
        admit_client: redis.Redis | None = None,
    ) -> None:
        self.client = client
        #: Admission's writes go through this one: a worker's waits in place while Redis
        #: refuses writes for memory (worker/runtime/room.py), the release never does.
        self.admit_client = admit_client or client
        self.ck = ck
        self.opts = opts
        self.scripts = scripts
        self.shape = opts.bloom
        #: This process's memory of URLs the crawl's filter holds (None: remember nothing).
        self.known = known
        #: The crawl's own host rates: the owner's, and an operator's set while it runs.
        self.rates = CrawlRates(client, ck, opts.rates)
        #: Each host's URLs beyond its head, out of Redis: the dispatcher's flushes and refills.
        self.tails = Tails(client, ck, opts, scripts)

    def domain_of(self, url: str) -> str:
        return domain_key(url, self.opts.domain_key)

    def admit(
        self,
        links: Iterable[tuple[str, int]],
        force: bool = False,
        known: int = 0,
        refused: Iterable[tuple[str, int]] = (),
        later: Carried | None = None,
    ) -> Admitted:
        """Admit ``(normalised url, depth)`` pairs that passed the scope check; those in
        ``refused`` (robots.txt disallows them) are only marked seen and counted, in the same
        admit.lua call as the links of their partition. ``known``: duplicates the caller
        recognised itself, counted in the first call (no round trip of their own); uncounted
        if there is no link at all. ``later``: the admit.lua calls go there, to be sent with
        another round trip (state/scripts.py Carried), where no room is to be reserved first;
        the Admitted returned then counts only those sent now."""
        total = Admitted()
        batches: dict[int, list[tuple[str, str, str]]] = {}
        # Streamed, not copied: seeds and replays arrive as generators of any length.
        both = chain(((link, False) for link in links), ((link, True) for link in refused))
        for (url, depth), disallowed in both:
            domain = self.domain_of(url)
            part = self.ck.for_domain(domain).index
            batch = batches.setdefault(part, [])
            # admit.lua reads an empty domain as "disallowed" (see its header).
            batch.append(("" if disallowed else domain, formats.entry(depth, url), url))
            if len(batch) >= ADMIT_CHUNK:
                total += self._admit(part, batch, force, known, later)
                batches[part], known = [], 0
        for part, batch in batches.items():
            if batch:
                total += self._admit(part, batch, force, known, later)
                known = 0
        return total

    def _admit(
        self,
        part: int,
        batch: list[tuple[str, str, str]],
        force: bool,
        extra: int = 0,
        later: Carried | None = None,
    ) -> list[int]:
        pk = self.ck.parts[part]
        # URLs this process already saw in the filter are duplicates without asking Redis.
        known = None if force else self.known
        hashes, skipped = None, 0
        if known is not None:
            batch, hashes, skipped = known.split(batch)
        if hashes is None:
            hashes = [url_hash(url) for _, _, url in batch]
        max_pages, cap = self._limits(sum(1 for d, _, _ in batch if d), force)
        packed, shards = self.shape.pack(hashes)
        call = calls.AdmitCall(
            max_pages=max_pages,
            k=self.shape.k,
            queue_prefix=pk.queue_prefix,
            dfs=self.opts.order == "dfs",
            shards=len(shards),
            force=force,
            shard_bits=self.shape.shard_bits,
            packed_hashes=packed,
            known=skipped + extra,
            cap=cap,
            tails=tuple(tails_args(self.opts, pk)),
        )
        keys = [pk.flow, pk.stats, pk.ready, pk.flush]
        keys += [pk.bloom(s) for s in shards]  # only the shards these URLs touch
        admit = Call(self.scripts.admit, keys, call.args([(d, v) for d, v, _ in batch]))

        def after(result: list[int]) -> None:
            if cap > int(result[0]):  # give back the room duplicates did not take
                self.admit_client.hincrby(self.ck.state, "reserved", int(result[0]) - cap)
            if known is not None and hashes and int(result[2]) == 0:
                known.remember(hashes)  # each one admitted or a duplicate: its bits are set

        # Carried only without room reserved (reserve.lua): a carrier that fails after
        # sending leaves no room to give back.
        if later is not None and cap < 0:
            later.add(admit, after)
            return [0, 0, 0, 0]  # counted by admit.lua when it is sent
        result: list[int] = admit.run(self.admit_client)
        after(result)
        return result

    def _limits(self, wanted: int, force: bool) -> tuple[int, int]:
        """admit.lua's (max_pages, cap): with one partition admit.lua checks max_pages itself
        (atomic, exact); with several, room is reserved crawl-wide first (reserve.lua)."""
        if force or not self.opts.max_pages or not wanted:
            return -1, -1
        if len(self.ck.parts) == 1:
            return self.opts.max_pages, -1
        granted = self.scripts.reserve(
            keys=[self.ck.state], args=[self.opts.max_pages, wanted], client=self.admit_client
        )
        return -1, int(granted)

    def release(
        self,
        part: int,
        limit: int,
        lease_seconds: float,
        worker: str = "",
        budget: int | None = None,
        cluster_rates: str = "",
        state: formats.Steering = formats.Steering.RUN,
        holders: tuple[str, ...] = (),
    ) -> Release:
        """Up to ``budget`` due entries (None: no cap) from at most ``limit`` domains of
        partition ``part``; ``cluster_rates`` is ``politeness.cluster_rates()``, ``state``
        the crawl's steering (``CrawlLifecycle.steering``: run, paused or cancelled); ``holders``
        the live fetch processes with a direct queue (``workers.affine``): a released URL is
        marked as held by its host's one (``workers.holder``), not by ``worker``."""
        pk = self.ck.parts[part]
        opts = self.opts
        ip_iv, ip_conc = address_limits(opts.ip_rate, opts.ip_concurrency, len(self.ck.parts))
        call = calls.ReleaseCall(
            limit=limit,
            queue_prefix=pk.queue_prefix,
            lease_prefix=pk.lease_prefix,
            domain_prefix=pk.domain_prefix,
            lease_seconds=lease_seconds,
            rate=opts.rate,
            burst=opts.burst,
            concurrency=opts.concurrency,
            worker=worker,
            budget=budget,
            cluster_rates=cluster_rates,
            owner_rates=self.rates.text(),
            steering=state,
            holders="\t".join(holders),
            address_interval=ip_iv,
            address_concurrency=ip_conc,
            address_prefix=pk.address_prefix,
            tails=tuple(tails_args(opts, pk)),
            dfs=opts.order == "dfs",
        )
        out = self.scripts.release(
            keys=[pk.ready, pk.inflight, pk.stats, pk.retry, pk.flow, pk.low],
            args=call.args(),
            client=self.client,
        )
        entries, resolve = [], []
        for i in range(1, len(out), 2):
            if not out[i + 1]:  # its address first
                resolve.append(_text(out[i]))
                continue
            depth, url = formats.parse_entry(_text(out[i + 1]))
            entries.append((_text(out[i]), depth, url))
        return Release(entries, resolve)

    def release_all(self, limit: int, lease_seconds: float, **kw: Any) -> Release:
        """One release over every partition (tests, tools): entries of all of them."""
        parts = [self.release(p, limit, lease_seconds, **kw) for p in range(len(self.ck.parts))]
        return Release(
            [e for r in parts for e in r.entries],
            [d for r in parts for d in r.resolve],
        )

    def cancel_pending(self, part: int, most: int = CANCEL_BATCH) -> Cancelled:
        """Count up to ``most`` pending URLs of partition ``part`` of a cancelled crawl as
        cancelled, unfetched and unrecorded, in one cancel.lua call."""
        pk = self.ck.parts[part]
        counted, left = self.scripts.cancel(
            keys=[pk.ready, pk.stats, pk.retry, pk.flow, pk.low, pk.flush, pk.spilled],
            args=[pk.queue_prefix, most, pk.spill_prefix, pk.index_prefix],
            client=self.client,
        )
        return Cancelled(int(counted), int(left))


def backlog(client: redis.Redis, ck: CrawlKeys, top: int = 10) -> list[tuple[str, int]]:
    """Domains with the most pending URLs, their tails counted (state/tails.py; scans at most
    1,000 ready domains and 1,000 waiting for a refill each partition): a read of the
    frontier for the views (status, the dashboard), apart from :class:`Frontier`, which
    admits and releases."""
    sizes: list[tuple[str, int]] = []
    for pk in ck.parts:
        ready = [_text(d) for d in client.zrange(pk.ready, 0, 999)]
        low = [_text(d) for d in client.srandmember(pk.low, 1000) or []]
        domains = list(dict.fromkeys(ready + low))
        pipe = client.pipeline(transaction=False)
        for d in domains:
            pipe.llen(pk.queue(d))
            pipe.llen(pk.spill(d))
        raw = pipe.execute()
        chunked = client.hmget(pk.spilled, domains) if domains else []
        heads = [raw[i] + raw[i + 1] for i in range(0, len(raw), 2)]
        sizes += [(d, h + int(c or 0)) for d, h, c in zip(domains, heads, chunked, strict=True)]
    return sorted(sizes, key=lambda x: -x[1])[:top]


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
