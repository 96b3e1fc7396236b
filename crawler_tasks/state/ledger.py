"""The ledger of one crawl: exactly-once completion accounting (start.lua, finish.lua), retries
(requeue.lua), dead letters, and the numbers ``progress()`` and ``summary.json`` are made of."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from . import formats
from .formats import Counter
from .keys import CrawlKeys, Keys
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
    def __init__(self, client: redis.Redis, keys: Keys, crawl_id: str, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.crawl_id = crawl_id
        self.ck: CrawlKeys = keys.crawl(crawl_id)
        self.scripts = scripts

    # --- per URL -------------------------------------------------------------------------
    def is_inflight(self, url: str) -> bool:
        return bool(self.client.hexists(self.ck.inflight, url))

    def start(self, url: str, worker: str, stage: str = "s") -> int:
        """Mark a fetch (``s``) or parse (``p``) as begun by ``worker`` (start.lua): 1 in
        flight, go on; 2 final but its record is not on disk (write it); 0 a duplicate; for a
        fetch also 3 (in flight, the crawl is cancelled) and 4 (in flight, its host is dead)."""
        keys, args = [self.ck.inflight, self.ck.unwritten], [url, stage, worker]
        if stage == "s":  # and: 3 the crawl is cancelled, 4 the URL's host is dead
            keys.append(self.ck.state)
            args.append(self.ck.domain_prefix)
        return int(self.scripts.start(keys=keys, args=args, client=self.client))

    def reclaim(self, url: str, entry: formats.Inflight, value: str) -> bool:
        """reclaim.lua: take ``url`` back from a dead worker if ``value`` is still current."""
        if entry.stage in ("r", "s"):
            how, arg = "fetch", formats.retry_member(entry.domain, entry.depth, url)
        else:  # its parse task is published again: the stage becomes "q" (mark_parse_queued)
            how, arg = "parse", value.rsplit("|", 1)[0]
        keys = [self.ck.inflight, self.ck.retry]
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
        for url, raw in self.client.hscan_iter(self.ck.inflight, count=1000):
            value = raw.decode()
            e = formats.Inflight.parse(value)
            since = float(e.worker or now) if e.stage == "q" else e.released_at
            late = e.stage in idle and 0 < since < now - lost_after
            dead = e.stage in ("r", "s", "p") and bool(e.worker) and e.worker not in alive
            lost = late or dead
            if lost:
                out.append((url.decode("utf-8", "surrogateescape"), e, value))
        return out

    def mark_parse_queued(self, url: str) -> None:
        """Fetched: its parse task is about to be published (stage "q")."""
        self.start(url, f"{time.time():.0f}", "q")

    def unwritten(self, url: str) -> formats.Unwritten | None:
        raw = self.client.hget(self.ck.unwritten, url)
        return None if raw is None else formats.Unwritten.loads(raw)

    def written(self, url: str) -> None:
        """``url``'s record is on disk."""
        self.client.hdel(self.ck.unwritten, url)

    def orphans(self, older_than: float) -> tuple[list[tuple[str, formats.Unwritten]], int]:
        """Unwritten records finished more than ``older_than`` s ago (their writer died, or is
        frozen), and how many younger ones there are (writers about to finish)."""
        limit, old, young = time.time() - older_than, [], 0
        for url, raw in self.client.hscan_iter(self.ck.unwritten, count=1000):
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
        for url, value in self.client.hscan_iter(self.ck.inflight, count=1000):
            entry = formats.Inflight.parse(value.decode())
            if not entry.started and 0 < entry.released_at < limit:
                stale.append((url.decode(), entry.depth))
        return stale

    def finish(self, url: str, entry: formats.Unwritten, counters: dict[str, int]) -> int:
        """finish.lua: URLs still outstanding after this one, or -1 if it was final already."""
        ck = self.ck
        args: list[str | int] = [url, entry.dumps()]
        for name, n in counters.items():
            args += [name, n]
        keys = [ck.inflight, ck.outstanding, ck.stats, ck.state, ck.persec, ck.attempts]
        left = self.scripts.finish(keys=[*keys, ck.unwritten], args=args, client=self.client)
        return int(left)

    def count_attempt(self, url: str) -> int:
        return int(self.client.hincrby(self.ck.attempts, url, 1))

    def requeue(self, domain: str, depth: int, url: str, delay: float) -> bool:
        """Back into the frontier after ``delay`` s (requeue.lua); False if not in flight."""
        done = self.scripts.requeue(
            keys=[self.ck.inflight, self.ck.retry],
            args=[url, formats.retry_member(domain, depth, url), delay],
            client=self.client,
        )
        return bool(done)

    def dead_letter(self, url: str, record: dict[str, Any]) -> None:
        self.client.hset(self.ck.failed, url, json.dumps(record))

    # --- whole crawl ---------------------------------------------------------------------
    def flags(self) -> dict[str, str]:
        raw = self.client.hgetall(self.ck.state)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def is_cancelled(self) -> bool:
        return self.client.hget(self.ck.state, "cancelled") == b"1"

    def counters(self) -> dict[str, int]:
        raw = self.client.hgetall(self.ck.stats)
        return {k.decode(): int(v) for k, v in raw.items()}

    def outstanding(self) -> int:
        return int(self.client.get(self.ck.outstanding) or 0)

    def recent_rate(self, now: float | None = None) -> float:
        """URLs finished per second over the last RATE_WINDOW whole seconds."""
        sec = int(now if now is not None else time.time())
        fields = [str(s) for s in range(sec - RATE_WINDOW + 1, sec + 1)]
        values = self.client.hmget(self.ck.persec, fields)
        return sum(int(v) for v in values if v) / RATE_WINDOW

    def progress(self) -> dict[str, Any]:
        c = self.counters()
        flags = self.flags()
        started = float(flags.get("started_at", 0) or 0)
        ended = float(flags.get("finished_at", 0) or 0)
        elapsed = max((ended or time.time()) - started, 1e-9) if started else 0.0
        done = c.get(Counter.DONE.value, 0)
        return {
            "crawl_id": self.crawl_id,
            "status": flags.get("status", "unknown"),
            "paused": flags.get("paused") == "1",
            **{name.value: c.get(name.value, 0) for name in _EARLY},
            "retrying": int(self.client.zcard(self.ck.retry)),
            "in_flight": int(self.client.hlen(self.ck.inflight)),
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
