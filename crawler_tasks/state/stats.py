"""A crawl's numbers: its counters (the stats hashes), the live figures and the rates, read
into the typed figures users see (state/figures.py: :class:`Progress`, :class:`Summary`)."""

from __future__ import annotations

import time

import redis

from .figures import RATE_WINDOW, Live, Progress
from .formats import Counter
from .keys import CrawlKeys
from .status import CrawlLifecycle
from .summary import Summary
from .watch_figures import Detail, Outlook


class Stats:
    def __init__(
        self,
        client: redis.Redis,
        ck: CrawlKeys,
        crawl_id: str,
        lifecycle: CrawlLifecycle,
        max_pages: int = 0,
    ) -> None:
        self.client = client
        self.ck = ck
        self.crawl_id = crawl_id
        self.lifecycle = lifecycle
        self.max_pages = max_pages  # the crawl's option: bounds its ETA

    # --- counters ------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Every counter as shown: ``done`` counts the URLs that reached a final state of
        their own, not those a cancel dropped unfetched (``cancelled``), everywhere the
        figures appear (progress, status, list, summary, metrics)."""
        c = self.raw_counters()
        if c.get(Counter.CANCELLED.value):
            c[Counter.DONE.value] = max(
                0, c.get(Counter.DONE.value, 0) - c[Counter.CANCELLED.value]
            )
        return c

    def raw_counters(self) -> dict[str, int]:
        """Every counter, the crawl-wide hash and the partitions' summed."""
        pipe = self.client.pipeline(transaction=False)
        for key in (self.ck.stats, *(pk.stats for pk in self.ck.parts)):
            pipe.hgetall(key)
        total: dict[str, int] = {}
        for raw in pipe.execute():
            for k, v in raw.items():
                name = k.decode()
                total[name] = total.get(name, 0) + int(v)
        return total

    def add(self, name: str, n: int = 1) -> int:
        """Add ``n`` to the crawl-wide counter ``name`` (a Counter or of a family); returns
        the new value of that hash field (the partitions' are not in it)."""
        return int(self.client.hincrby(self.ck.stats, name, n))

    def put(self, name: str, value: int) -> None:
        """Set the crawl-wide counter ``name`` (a figure known only at the end)."""
        self.client.hset(self.ck.stats, name, value)

    # --- progress ------------------------------------------------------------------------
    def outstanding(self) -> int:
        """URLs admitted and not final (for display: the partitions are read one by one)."""
        return max(0, self.lifecycle.flow("in") - self.lifecycle.flow("out"))

    def recent_rate(self, now: float | None = None) -> float:
        """URLs finished per second over the last RATE_WINDOW whole seconds."""
        sec = int(now if now is not None else time.time())
        fields = [str(s) for s in range(sec - RATE_WINDOW + 1, sec + 1)]
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.hmget(pk.persec, fields)
        return sum(int(v) for values in pipe.execute() for v in values if v) / RATE_WINDOW

    def live(self) -> dict[str, int]:
        """Every :class:`Live` figure, read from the partitions now."""
        pipe = self.client.pipeline(transaction=False)
        for pk in self.ck.parts:
            pipe.zcard(pk.retry)
            pipe.hlen(pk.inflight)
        raw = pipe.execute()
        return {
            Live.RETRYING.value: sum(raw[0::2]),
            Live.IN_FLIGHT.value: sum(raw[1::2]),
            Live.OUTSTANDING.value: self.outstanding(),
        }

    def progress(self, outlook: Outlook | None = None, detail: Detail | None = None) -> Progress:
        """The crawl's figures now, with the sections a view read besides (``outlook``:
        state/outlook.py; ``detail``: the busiest hosts' pace, surface/figures.py)."""
        state = self.lifecycle.read()
        started, ended = state.started_at, state.finished_at
        return Progress(
            crawl_id=self.crawl_id,
            state=state,
            counts=self.counters(),
            live=self.live(),
            elapsed=max((ended or time.time()) - started, 1e-9) if started else 0.0,
            recent_rate=self.recent_rate(),
            max_pages=self.max_pages,
            output=self.lifecycle.output_problem(state),
            outlook=outlook,
            detail=detail,
        )

    def summary(self) -> Summary:
        """What ``summary.json`` holds: totals, duration, rate and histograms."""
        return Summary.of(self.progress())
