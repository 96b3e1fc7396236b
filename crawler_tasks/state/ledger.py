"""The ledger of one crawl, URL by URL: exactly-once completion accounting (start.lua,
finish.lua), what is in flight and who holds it (reclaim.lua), and retries (requeue.lua).
The records finish.lua leaves to write are unwritten.py's, the dead letters dead_letters.py's;
the crawl's numbers are in stats.py, its status in status.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis

from . import formats
from .keys import CrawlKeys
from .scripts import Call, Scripts, run_each, run_together


def scan_parts(client: redis.Redis, ck: CrawlKeys, name: str) -> Iterator[tuple[bytes, bytes]]:
    """Every field of the hash ``name`` (a :class:`~.keys.PartKeys` attribute) of every
    partition."""
    for pk in ck.parts:
        yield from client.hscan_iter(getattr(pk, name), count=1000)


class Ledger:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, crawl_id: str, scripts: Scripts) -> None:
        self.client = client
        self.crawl_id = crawl_id
        self.ck = ck
        self.scripts = scripts

    # --- per URL (each in its partition) ---------------------------------------------------
    def start(self, url: str, worker: str, stage: str = "s") -> int:
        """Mark a fetch (``s``) or parse (``p``) as begun by ``worker`` (start.lua): 1 in
        flight, go on; 2 final but its record is not on disk (write it); 0 a duplicate; for a
        fetch also 3 (in flight, the crawl is cancelled) and 4 (in flight, its host is dead)."""
        return self.start_many([url], worker, stage)[url].code

    def start_many(
        self, urls: list[str], worker: str, stage: str = "s"
    ) -> dict[str, formats.Begun]:
        """:meth:`start` for several URLs: one start.lua call per partition among them. A
        fetch that goes on also gets its host's next send slot (gate_lib.lua): the seconds
        to wait before sending it, and whether its host's next URL waits for its lease."""
        by_part: dict[int, list[str]] = {}
        for url in urls:
            by_part.setdefault(self.ck.for_url(url).index, []).append(url)
        out: dict[str, formats.Begun] = {}
        for part, some in by_part.items():
            pk = self.ck.parts[part]
            keys = [pk.inflight, pk.unwritten]
            if stage == "s":  # and: 3 the crawl is cancelled, 4 the URL's host is dead
                keys.append(pk.flow)
            prefixes = [pk.domain_prefix, pk.address_prefix] if stage == "s" else ["", ""]
            asked = time.monotonic()  # how late a send is counts from here (send_gate.py)
            got = self.scripts.start(
                keys=keys, args=[stage, worker, *prefixes, *some], client=self.client
            )
            at = time.monotonic()  # when the reply came: the waits count from it
            n = len(some)
            codes = got[:n]
            waits = got[n : 2 * n] or [b"0"] * n
            awaited = got[2 * n :] or [0] * n
            for url, code, wait, aw in zip(some, codes, waits, awaited, strict=True):
                out[url] = formats.Begun(int(code), float(wait), at, aw == 1, asked)
        return out

    def send_slot(self, domain: str, url: str = "", worker: str = "") -> float:
        """Another slot of ``domain``'s send gate (gate.lua): for its robots.txt (``url``
        empty), or for ``url`` whose slot went by while its task was held up, if the URL is
        still this worker's fetch. Seconds to wait before sending; -1: no longer ours."""
        pk = self.ck.for_domain(domain)
        inflight = self.ck.for_url(url).inflight if url else pk.inflight
        args = [url, f"s:{worker}" if url else "", pk.address_prefix]
        keys = [pk.domain(domain), inflight]
        return float(self.scripts.gate(keys=keys, args=args, client=self.client))

    def push_send_slot(self, domain: str, ago: float = 0.0) -> None:
        """``domain``'s send gate (and its address's) count on from ``ago`` seconds before now:
        a request of it went later than its slot (its host's ceiling held it back, a rendered
        page's subrequest was written late)."""
        pk = self.ck.for_domain(domain)
        args = ["", "", pk.address_prefix, -ago]
        self.scripts.gate(keys=[pk.domain(domain), pk.inflight], args=args, client=self.client)

    def entry(self, url: str) -> tuple[formats.Inflight, str] | None:
        """``url``'s in-flight entry and its raw value (for :meth:`reclaim`); None if it is
        not in flight."""
        raw = self.client.hget(self.ck.for_url(url).inflight, url)
        if raw is None:
            return None
        value = raw.decode() if isinstance(raw, bytes) else raw
        return formats.Inflight.parse(value), value

    def reclaim(self, url: str, entry: formats.Inflight, value: str) -> bool:
        """reclaim.lua: take ``url`` back from a dead worker if ``value`` is still current."""
        if entry.stage in ("r", "s"):
            how, arg = "fetch", formats.retry_member(entry.domain, entry.depth, url)
        else:  # its parse (render) task is published again: stage "q" ("v"), see mark_queued
            how, arg = "parse", value.rsplit("|", 1)[0]
        pk = self.ck.for_url(url)
        keys = [pk.inflight, pk.retry]
        return bool(
            self.scripts.reclaim(keys=keys, args=[url, value, how, arg], client=self.client)
        )

    def stuck(
        self,
        alive: set[str],
        lost_after: float,
        idle: set[str],
        fetch_after: float | None = None,
        now: float | None = None,
    ) -> list[tuple[str, formats.Inflight, str]]:
        """(url, entry, raw value) of in-flight URLs nobody will move: released, fetched or
        parsed by a worker not in ``alive``; or released ("r") / queued for parse ("q") more
        than ``lost_after`` seconds ago and still not started although the broker holds no
        message of that kind (``idle`` names the stages whose queues are empty): their
        message went down with a worker. With ``fetch_after``, also every URL released to a
        living process that long ago and not started: a candidate the caller checks message
        by message (worker/dispatch/lost.py). Entries that do not say who holds them (older
        versions) are left alone."""
        now = time.time() if now is None else now
        out = []
        for url, raw in scan_parts(self.client, self.ck, "inflight"):
            value = raw.decode()
            e = formats.Inflight.parse(value)
            since = float(e.worker or now) if e.stage in ("q", "v") else e.released_at
            late = e.stage in idle and 0 < since < now - lost_after
            dead = e.stage in ("r", "s", "p", "w") and bool(e.worker) and e.worker not in alive
            if fetch_after is not None and e.stage == "r" and e.worker:
                late = late or 0 < e.released_at < now - fetch_after
            if late or dead:
                out.append((url.decode("utf-8", "surrogateescape"), e, value))
        return out

    def mark_parse_queued(self, url: str) -> None:
        """Fetched: its parse task is about to be published (stage "q")."""
        self.start(url, f"{time.time():.0f}", "q")

    def mark_render_queued(self, url: str) -> None:
        """Fetched: its render task is about to be published (stage "v"; "w" once begun)."""
        self.start(url, f"{time.time():.0f}", "v")

    def stale_releases(self, older_than: float, now: float | None = None) -> list[tuple[str, int]]:
        """(url, depth) released more than ``older_than`` s ago whose fetch never began: the
        message was lost between release.lua and the broker (a dispatcher died there)."""
        limit = (now if now is not None else time.time()) - older_than
        stale = []
        for url, value in scan_parts(self.client, self.ck, "inflight"):
            entry = formats.Inflight.parse(value.decode())
            if not entry.started and 0 < entry.released_at < limit:
                stale.append((url.decode(), entry.depth))
        return stale

    def finish(
        self,
        url: str,
        entry: formats.Unwritten | None,
        counters: dict[str, int],
        after: Call | None = None,
    ) -> int:
        """finish.lua: URLs of the URL's partition still outstanding after this one (0: see
        ``CrawlLifecycle.finishing``), or -1 if it was final already. ``entry`` None: no record
        to write. ``after``: a call sent first in the same round trip (the lease's done.lua,
        :meth:`Lease.handoff <crawler_tasks.state.politeness.Lease.handoff>`)."""
        call = self.finish_call(url, entry, counters)
        if after is not None:
            return int(run_together(self.client, [after, call])[1])
        return int(call.run(self.client))

    def finish_carrying(
        self,
        carry: Call | None,
        url: str,
        entry: formats.Unwritten | None,
        counters: dict[str, int],
        after: Call | None = None,
    ) -> tuple[Any, int | Exception]:
        """:meth:`finish` with ``carry`` (another URL's :meth:`commit_call`, or None) sent
        first in its round trip: ``carry``'s reply (or error; None without one), and finish's
        answer or the first error of ``after`` and finish.lua (the caller settles ``carry``
        before raising it)."""
        calls = [c for c in (carry, after) if c is not None]
        replies = run_each(self.client, [*calls, self.finish_call(url, entry, counters)])
        mine = replies[1:] if carry is not None else replies
        error = next((r for r in mine if isinstance(r, Exception)), None)
        return (replies[0] if carry is not None else None), error if error else int(mine[-1])

    def finish_call(
        self, url: str, entry: formats.Unwritten | None, counters: dict[str, int]
    ) -> Call:
        pk = self.ck.for_url(url)
        args: list[str | int] = [url, entry.dumps() if entry is not None else ""]
        for name, n in counters.items():
            args += [name, n]
        keys = [pk.inflight, pk.flow, pk.stats, pk.persec, pk.attempts, pk.unwritten]
        return Call(self.scripts.finish, keys, args)

    def count_attempt(self, url: str) -> int:
        return int(self.client.hincrby(self.ck.for_url(url).attempts, url, 1))

    def count_takeback(self, url: str) -> int:
        """One more take-back of ``url`` from a worker that went silent. Not an attempt: a
        process that was only stalled (a frozen VM, memory pressure) may be alive, and the
        URL did nothing wrong; this count only stops a URL that kills every worker."""
        return int(self.client.hincrby(self.ck.for_url(url).takebacks, url, 1))

    def requeue(self, domain: str, depth: int, url: str, delay: float) -> bool:
        """Back into the frontier after ``delay`` s (requeue.lua); False if not in flight."""
        pk = self.ck.for_domain(domain)
        done = self.scripts.requeue(
            keys=[pk.inflight, pk.retry],
            args=[url, formats.retry_member(domain, depth, url), delay],
            client=self.client,
        )
        return bool(done)
