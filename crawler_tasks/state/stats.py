"""A crawl's numbers: its counters (the stats hashes), the figures ``progress()`` shows and
``summary.json`` holds, and the rates. Which counters progress() shows, and where, is said by
:class:`~crawler_tasks.state.formats.Counter` itself."""

from __future__ import annotations

import time
from typing import Any

import redis

from . import formats
from .formats import Counter, Group, Shown
from .keys import CrawlKeys
from .status import CrawlLifecycle

#: Seconds of finished-URL counts averaged for the recent pages/s figure.
RATE_WINDOW = 10
#: Figures of progress() that are not counters (read live from the partitions), with their
#: help text: declared here once for every view, as the counters are in formats.Counter.
LIVE = {
    "retrying": "URLs waiting for a retry",
    "in_flight": "URLs released to workers and not yet final",
    "outstanding": "URLs admitted and not yet final",
}
#: Counters shown by progress(), before and after the live figures.
_EARLY = Counter.shown_in(Shown.EARLY)
_LATE = Counter.shown_in(Shown.LATE)


class Stats:
    def __init__(
        self, client: redis.Redis, ck: CrawlKeys, crawl_id: str, lifecycle: CrawlLifecycle
    ) -> None:
        self.client = client
        self.ck = ck
        self.crawl_id = crawl_id
        self.lifecycle = lifecycle

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
        state = self.lifecycle.read()
        retrying, in_flight = self._sizes()
        started, ended = state.started_at, state.finished_at
        elapsed = max((ended or time.time()) - started, 1e-9) if started else 0.0
        done = c.get(Counter.DONE.value, 0)
        return {
            "crawl_id": self.crawl_id,
            "status": state.status.value,
            "paused": state.paused,
            **{name.value: c.get(name.value, 0) for name in _EARLY},
            "retrying": retrying,
            "in_flight": in_flight,
            "outstanding": self.outstanding(),
            **{name.value: c.get(name.value, 0) for name in _LATE},
            "elapsed_s": round(elapsed, 3),
            "pages_per_s": round(done / elapsed, 2) if elapsed else 0.0,
            "recent_pages_per_s": self.recent_rate(),
            "output": self.lifecycle.output_problem(state),
            "error": state.error,
            formats.TLS_NOTE: state.tls_error_why,
        }

    @staticmethod
    def families(counters: dict[str, int]) -> dict[str, dict[str, int]]:
        """The counter families as ``summary.json`` names them: ``status_codes``,
        ``failures``, ``skipped``, ``changes`` (each ``{name: count}``)."""
        families: dict[str, dict[str, int]] = {name: {} for name in formats.FAMILIES.values()}
        for k, v in counters.items():
            family, _, rest = k.partition(":")
            if rest and family in formats.FAMILIES:
                families[formats.FAMILIES[family]][rest] = v
        return families

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` holds: totals, duration, rate and histograms."""
        c = self.counters()
        p = self.progress()
        families = self.families(c)
        state = self.lifecycle.read()
        return {
            "crawl_id": self.crawl_id,
            "status": p["status"],
            "started_at": state.started_at,
            "finished_at": state.finished_at or None,
            "duration_s": p["elapsed_s"],
            "pages_per_s": p["pages_per_s"],
            "error": state.error,
            "robots_unreachable_why": state.robots_unreachable_why,
            formats.TLS_NOTE: state.tls_error_why,
            "counters": {k: v for k, v in c.items() if ":" not in k},
            **families,
            "status_codes": dict(sorted(families["status_codes"].items())),
        }


def declared(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every counter and live figure as the views show them (``status``, the summary, the
    dashboard): ``{name, group, help, value}`` in their group's order, then declaration order;
    ``values``: progress() or the counters (a name missing counts 0)."""
    rows = [
        {"name": c.value, "group": c.group.value, "help": c.help, "value": values.get(c.value, 0)}
        for c in Counter
    ]
    live = Group.FRONTIER.value
    rows += [
        {"name": n, "group": live, "help": h, "value": values.get(n, 0)} for n, h in LIVE.items()
    ]
    order = [g.value for g in Group]
    return sorted(rows, key=lambda r: order.index(r["group"]))  # stable: declaration order
