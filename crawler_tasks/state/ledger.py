"""The ledger of one crawl: exactly-once completion accounting (start.lua, finish.lua), retries
(requeue.lua), dead letters, and the numbers ``progress()`` and ``summary.json`` are made of."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import redis

from . import formats
from .formats import Counter
from .keys import CrawlKeys
from .scripts import Scripts

#: Seconds of finished-URL counts averaged for the recent pages/s figure.
RATE_WINDOW = 10
#: Counters shown by progress(), before and after the live figures.
_EARLY = (Counter.DISCOVERED, Counter.ADMITTED, Counter.DEDUPLICATED, Counter.QUEUED)
_LATE = (
    Counter.DONE,
    Counter.FETCHED,
    Counter.PARSED,
    Counter.FAILED,
    Counter.ROBOTS_DISALLOWED,
    Counter.CANCELLED,
    Counter.BYTES,
    Counter.ITEMS,
    Counter.EXTRACT_ERRORS,
)


class Ledger:
    def __init__(self, client: redis.Redis, ck: CrawlKeys, crawl_id: str, scripts: Scripts) -> None:
        self.client = client
        self.crawl_id = crawl_id
        self.ck = ck
        self.scripts = scripts

    # --- per URL (each in its partition) ---------------------------------------------------
    def is_inflight(self, url: str) -> bool:
        return bool(self.client.hexists(self.ck.for_url(url).inflight, url))

    def start(self, url: str, worker: str, stage: str = "s") -> int:
        """Mark a fetch (``s``) or parse (``p``) as begun by ``worker`` (start.lua): 1 in
        flight, go on; 2 final but its record is not on disk (write it); 0 a duplicate; for a
        fetch also 3 (in flight, the crawl is cancelled) and 4 (in flight, its host is dead)."""
        return self.start_many([url], worker, stage)[url]

    def start_many(self, urls: list[str], worker: str, stage: str = "s") -> dict[str, int]:
        """:meth:`start` for several URLs: one start.lua call per partition among them."""
        by_part: dict[int, list[str]] = {}
        for url in urls:
            by_part.setdefault(self.ck.for_url(url).index, []).append(url)
        out: dict[str, int] = {}
        for part, some in by_part.items():
            pk = self.ck.parts[part]
            keys = [pk.inflight, pk.unwritten]
            if stage == "s":  # and: 3 the crawl is cancelled, 4 the URL's host is dead
                keys.append(pk.flow)
            prefix = pk.domain_prefix if stage == "s" else ""
            got = self.scripts.start(
                keys=keys, args=[stage, worker, prefix, *some], client=self.client
            )
            out.update(zip(some, (int(v) for v in got), strict=True))
        return out

    def reclaim(self, url: str, entry: formats.Inflight, value: str) -> bool:
        """reclaim.lua: take ``url`` back from a dead worker if ``value`` is still current."""
        if entry.stage in ("r", "s"):
            how, arg = "fetch", formats.retry_member(entry.domain, entry.depth, url)
        else:  # its parse task is published again: the stage becomes "q" (mark_parse_queued)
            how, arg = "parse", value.rsplit("|", 1)[0]
        pk = self.ck.for_url(url)
        keys = [pk.inflight, pk.retry]
        return bool(
            self.scripts.reclaim(keys=keys, args=[url, value, how, arg], client=self.client)
        )

    def stuck(
        self, alive: set[str], lost_after: float, idle: set[str], now: float | None = None
    ) -> list[tuple[str, formats.Inflight, str]]:
        """(url, entry, raw value) of in-flight URLs nobody will move: released, fetched or
        parsed by a worker not in ``alive``; or released ("r") / queued for parse ("q") more
        than ``lost_after`` seconds ago and still not started although the broker holds no
        message of that kind (``idle`` names the stages whose queues are empty): their
        message went down with a worker. Entries that do not say who holds them (older
        versions) are left alone."""
        now = time.time() if now is None else now
        out = []
        for url, raw in self._scan("inflight"):
            value = raw.decode()
            e = formats.Inflight.parse(value)
            since = float(e.worker or now) if e.stage == "q" else e.released_at
            late = e.stage in idle and 0 < since < now - lost_after
            dead = e.stage in ("r", "s", "p") and bool(e.worker) and e.worker not in alive
            if late or dead:
                out.append((url.decode("utf-8", "surrogateescape"), e, value))
        return out

    def _scan(self, name: str) -> Iterator[tuple[bytes, bytes]]:
        """Every field of the hash ``name`` of every partition."""
        for pk in self.ck.parts:
            yield from self.client.hscan_iter(getattr(pk, name), count=1000)

    def mark_parse_queued(self, url: str) -> None:
        """Fetched: its parse task is about to be published (stage "q")."""
        self.start(url, f"{time.time():.0f}", "q")

    def unwritten(self, url: str) -> formats.Unwritten | None:
        raw = self.client.hget(self.ck.for_url(url).unwritten, url)
        return None if raw is None else formats.Unwritten.loads(raw)

    def claim(self, url: str, read: formats.Unwritten, claimed: formats.Unwritten) -> bool:
        """claim.lua: take over the unwritten record ``read`` as ``claimed`` (this process's
        file, now); False if it was written or claimed by another process meanwhile."""
        keys = [self.ck.for_url(url).unwritten]
        args = [url, read.rid, repr(read.ts), claimed.dumps()]
        return bool(self.scripts.claim(keys=keys, args=args, client=self.client))

    def written(self, url: str) -> None:
        """``url``'s record is on disk."""
        self.client.hdel(self.ck.for_url(url).unwritten, url)

    def orphans(self, older_than: float) -> tuple[list[tuple[str, formats.Unwritten]], int]:
        """Unwritten records finished more than ``older_than`` s ago (their writer died, or is
        frozen), and how many younger ones there are (writers about to finish)."""
        limit, old, young = time.time() - older_than, [], 0
        for url, raw in self._scan("unwritten"):
            entry = formats.Unwritten.loads(raw)
            if entry.ts < limit:
                old.append((url.decode("utf-8", "surrogateescape"), entry))
            else:
                young += 1
        return old, young

    def stale_releases(self, older_than: float, now: float | None = None) -> list[tuple[str, int]]:
        """(url, depth) released more than ``older_than`` s ago whose fetch never began: the
        message was lost between release.lua and the broker (a dispatcher died there)."""
        limit = (now if now is not None else time.time()) - older_than
        stale = []
        for url, value in self._scan("inflight"):
            entry = formats.Inflight.parse(value.decode())
            if not entry.started and 0 < entry.released_at < limit:
                stale.append((url.decode(), entry.depth))
        return stale

    def finish(self, url: str, entry: formats.Unwritten | None, counters: dict[str, int]) -> int:
        """finish.lua: URLs of the URL's partition still outstanding after this one (0: see
        :meth:`settle`), or -1 if it was final already. ``entry`` None: no record to write."""
        pk = self.ck.for_url(url)
        args: list[str | int] = [url, entry.dumps() if entry is not None else ""]
        for name, n in counters.items():
            args += [name, n]
        keys = [pk.inflight, pk.flow, pk.stats, pk.persec, pk.attempts, pk.unwritten]
        return int(self.scripts.finish(keys=keys, args=args, client=self.client))

    def count_attempt(self, url: str) -> int:
        return int(self.client.hincrby(self.ck.for_url(url).attempts, url, 1))

    def requeue(self, domain: str, depth: int, url: str, delay: float) -> bool:
        """Back into the frontier after ``delay`` s (requeue.lua); False if not in flight."""
        pk = self.ck.for_domain(domain)
        done = self.scripts.requeue(
            keys=[pk.inflight, pk.retry],
            args=[url, formats.retry_member(domain, depth, url), delay],
            client=self.client,
        )
        return bool(done)

    def dead_letter(self, url: str, record: dict[str, Any]) -> None:
        self.client.hset(self.ck.for_url(url).failed, url, json.dumps(record))

    def dead_letters(self) -> list[dict[str, Any]]:
        return [json.loads(v) for pk in self.ck.parts for v in self.client.hvals(pk.failed)]

    # --- completion ------------------------------------------------------------------------
    def drained(self) -> bool:
        """True if no URL of the crawl is outstanding. Each partition counts the URLs admitted
        into it ("in") and those that reached a final state ("out"), but no command reads all
        partitions at once; so every "out" is read first, then every "in": if the sums are
        equal, then at the moment between the two reads every admitted URL was final, and as
        a URL is admitted only by a task of an outstanding one (its children are admitted
        before it finishes), nothing can be admitted after that."""
        parts = self.ck.parts
        if len(parts) == 1:
            got = self.client.hmget(parts[0].flow, "in", "out")
            return int(got[0] or 0) == int(got[1] or 0)
        return self._sum("flow", "out") >= self._sum("flow", "in")

    def _sum(self, name: str, field: str) -> int:
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hget(getattr(pk, name), field)
        return sum(int(v or 0) for v in pipe.execute())

    def settle(self) -> bool:
        """True if the crawl is finishing: marked now (finishing.lua) because it is drained,
        or earlier. Called when a partition empties, by redelivered tasks and dispatchers."""
        status = self.client.hget(self.ck.state, "status")
        if status == b"finishing":
            return True
        if status not in (b"running", b"paused") or not self.drained():
            return False
        return bool(self.scripts.finishing(keys=[self.ck.state], client=self.client))

    # --- whole crawl ---------------------------------------------------------------------
    def flags(self) -> dict[str, str]:
        raw = self.client.hgetall(self.ck.state)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def is_cancelled(self) -> bool:
        return self.client.hget(self.ck.state, "cancelled") == b"1"

    def steering(self) -> str:
        """What release.lua is told: "run", "paused", "cancelled" or "finishing"."""
        paused, cancelled, status = self.client.hmget(
            self.ck.state, "paused", "cancelled", "status"
        )
        if status == b"finishing":
            return "finishing"
        return "cancelled" if cancelled == b"1" else "paused" if paused == b"1" else "run"

    def copy_cancelled(self) -> None:
        """Tell every partition the crawl is cancelled (start.lua stops fetches there)."""
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hset(pk.flow, "cancelled", "1")
        pipe.execute()

    def counters(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for key in (self.ck.stats, *(pk.stats for pk in self.ck.parts)):
            pipe.hgetall(key)
        total: dict[str, int] = {}
        for raw in pipe.execute():
            for k, v in raw.items():
                name = k.decode()
                total[name] = total.get(name, 0) + int(v)
        return total

    def outstanding(self) -> int:
        """URLs admitted and not final (for display: the partitions are read one by one)."""
        return max(0, self._sum("flow", "in") - self._sum("flow", "out"))

    def recent_rate(self, now: float | None = None) -> float:
        """URLs finished per second over the last RATE_WINDOW whole seconds."""
        sec = int(now if now is not None else time.time())
        fields = [str(s) for s in range(sec - RATE_WINDOW + 1, sec + 1)]
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hmget(pk.persec, fields)
        return sum(int(v) for values in pipe.execute() for v in values if v) / RATE_WINDOW

    def _sizes(self) -> tuple[int, int]:
        """URLs waiting for a retry, URLs in flight."""
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.zcard(pk.retry)
            pipe.hlen(pk.inflight)
        raw = pipe.execute()
        return sum(raw[0::2]), sum(raw[1::2])

    def progress(self) -> dict[str, Any]:
        c = self.counters()
        flags = self.flags()
        retrying, in_flight = self._sizes()
        started = float(flags.get("started_at", 0) or 0)
        ended = float(flags.get("finished_at", 0) or 0)
        elapsed = max((ended or time.time()) - started, 1e-9) if started else 0.0
        done = c.get(Counter.DONE.value, 0)
        return {
            "crawl_id": self.crawl_id,
            "status": flags.get("status", "unknown"),
            "paused": flags.get("paused") == "1",
            **{name.value: c.get(name.value, 0) for name in _EARLY},
            "retrying": retrying,
            "in_flight": in_flight,
            "outstanding": self.outstanding(),
            **{name.value: c.get(name.value, 0) for name in _LATE},
            "elapsed_s": round(elapsed, 3),
            "pages_per_s": round(done / elapsed, 2) if elapsed else 0.0,
            "recent_pages_per_s": self.recent_rate(),
        }

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` holds: totals, duration, rate and histograms."""
        c = self.counters()
        p = self.progress()
        families: dict[str, dict[str, int]] = {name: {} for name in formats.FAMILIES.values()}
        for k, v in c.items():
            family, _, rest = k.partition(":")
            if rest and family in formats.FAMILIES:
                families[formats.FAMILIES[family]][rest] = v
        flags = self.flags()
        return {
            "crawl_id": self.crawl_id,
            "status": p["status"],
            "started_at": float(flags.get("started_at", 0) or 0),
            "finished_at": float(flags.get("finished_at", 0) or 0) or None,
            "duration_s": p["elapsed_s"],
            "pages_per_s": p["pages_per_s"],
            "counters": {k: v for k, v in c.items() if ":" not in k},
            **families,
            "status_codes": dict(sorted(families["status_codes"].items())),
        }
