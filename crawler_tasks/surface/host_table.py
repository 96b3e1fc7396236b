"""The dashboard's per-host table: every host with work, sorted and paged on the server.

Reading 100,000 hosts takes Redis ~400,000 pipelined commands (state/hosts.py), far too many
for every page view, so each crawl's table is one snapshot kept for ``max(MIN_AGE, AGE_FACTOR
x the time its read took)``: sorting and paging a snapshot takes milliseconds, and however
many browsers poll, Redis reads each crawl's hosts at most once per snapshot age. A request
that finds its snapshot stale is answered from it while a thread reads the next one (only the
first request of a crawl waits for a read).

Columns: :data:`COLUMNS` always; :data:`OPTIONAL` only when some host has a value (the
crawl's own rate for a host, its ``rates`` option or one set on the dashboard; the render
tier's per-host state, ``render``: "always"/"never" as the options say, or under ``auto`` its
plan's state, state/render_plan.py: "sampling 1/2", "render", "raw").
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..state.ceilings import read as read_ceilings
from ..state.hosts import host_names, host_rows
from .crawl import Crawl

#: Seconds a snapshot is kept at least (under the page's poll of 3 s: each poll reads it
#: anew), and how many times its read time at least.
MIN_AGE = 1.0
AGE_FACTOR = 10.0
#: (row key, heading) of the table, in order.
COLUMNS = (
    ("domain", "Host"),
    ("pending", "Backlog"),
    ("in_flight", "In flight"),
    ("rate", "Rate (req/s)"),
    ("crawl_delay", "Crawl-delay (s)"),
    ("state", "Circuit"),
    ("fails", "Failures in a row"),
    ("ceiling", "Ceiling (req/s)"),
    ("interval", "Interval (s)"),
    ("address", "Address group"),
    ("why", "Why this pace"),
)
#: Columns shown only when some host has a value.
OPTIONAL = (("crawl_rate", "This crawl's rate (req/s)"), ("render", "Render"))
SORTABLE = frozenset(k for k, _ in COLUMNS + OPTIONAL)
#: Seconds a request waits for a crawl's first read before it answers ``reading``.
COLD_WAIT = 0.25
#: Most rows one request may ask for.
MAX_LIMIT = 500


@dataclass
class Snapshot:
    rows: list[dict[str, Any]]
    taken_at: float
    took_s: float
    columns: list[tuple[str, str]]
    orders: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def stale(self, now: float) -> bool:
        return now - self.taken_at > max(MIN_AGE, AGE_FACTOR * self.took_s)

    def ordered(self, key: str) -> list[dict[str, Any]]:
        """Rows by ``key``, largest first, hosts without a value last (cached per key)."""
        if key not in self.orders:
            present = [r for r in self.rows if r.get(key) is not None]
            absent = [r for r in self.rows if r.get(key) is None]
            present.sort(key=lambda r: r["domain"])  # ties by name, A to Z (sorts are stable)
            if key != "domain":
                # A column may mix numbers and words ("no limit"): words sort above numbers.
                present.sort(key=lambda r: (isinstance(r[key], str), r[key]), reverse=True)
            else:
                present.reverse()
            self.orders[key] = present + absent
        return self.orders[key]


def take(crawl: Crawl) -> Snapshot:
    """Read every host of the crawl now."""
    started = time.perf_counter()
    store = crawl.store
    # Hosts with work, and those this crawl has a rate of its own for (shown even idle).
    names = sorted(set(host_names(crawl.client, store.ck)) | set(store.frontier.rates))
    ceilings = read_ceilings(crawl.client, crawl.keys)
    rows = host_rows(store.politeness, names, crawl.options.rate, ceilings)
    opts = crawl.options
    renders = store.render_plan.states(opts.render, opts.render_hosts, names)
    for row in rows:  # a crawl that never renders has no render column (OPTIONAL)
        row["render"] = renders.get(row["domain"])
    columns = list(COLUMNS) + [c for c in OPTIONAL if any(r.get(c[0]) is not None for r in rows)]
    return Snapshot(rows, time.time(), time.perf_counter() - started, columns)


class HostTables:
    """The snapshots of every crawl asked for (one process: the dashboard's). No request
    waits longer than COLD_WAIT for a read: the first one of a big crawl answers ``reading``
    and the page asks again."""

    def __init__(self) -> None:
        self._snaps: dict[str, Snapshot] = {}
        self._reading: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def snapshot(self, crawl: Crawl) -> Snapshot | None:
        """The crawl's snapshot (a stale one while its next is read), or None if its first
        read takes longer than COLD_WAIT."""
        snap = self._snaps.get(crawl.id)
        if snap is not None and not snap.stale(time.time()):
            return snap
        done = self._read_later(crawl)
        # A table read quickly is waited for: served stale, it lagged the page's figures
        # by up to MIN_AGE plus a poll (issue 50: a rate 3-20 s old, a cancelled crawl's
        # backlog); only a big crawl's slow read answers from the last snapshot meanwhile.
        if snap is None or snap.took_s < COLD_WAIT:
            done.wait(COLD_WAIT)
        return self._snaps.get(crawl.id)

    def forget(self, crawl_id: str | None) -> None:
        """Drop the crawl's snapshot (None: every crawl's): an operator changed what it shows
        (a host's rate, a ceiling, its steering), so the next request reads it again rather
        than showing the old value."""
        if crawl_id is None:
            self._snaps.clear()
        else:
            self._snaps.pop(crawl_id, None)

    def _read_later(self, crawl: Crawl) -> threading.Event:
        with self._lock:
            if crawl.id in self._reading:
                return self._reading[crawl.id]
            done = self._reading[crawl.id] = threading.Event()

        def read() -> None:
            try:
                self._snaps[crawl.id] = take(crawl)
            finally:
                with self._lock:
                    del self._reading[crawl.id]
                done.set()

        threading.Thread(target=read, name="dashboard-hosts", daemon=True).start()
        return done

    def page(
        self,
        crawl: Crawl,
        sort: str = "pending",
        desc: bool = True,
        offset: int = 0,
        limit: int = 50,
    ) -> dict[str, Any]:
        """One page of the table: ``limit`` rows from ``offset`` in ``sort`` order; or
        ``reading`` (no rows yet) while the crawl's first read runs."""
        snap = self.snapshot(crawl)
        if snap is None:
            return {"reading": True, "total": None, "rows": [], "columns": list(COLUMNS)}
        rows = snap.ordered(sort)
        if not desc:
            valued = [r for r in rows if r.get(sort) is not None]
            rows = valued[::-1] + rows[len(valued) :]
        return {
            "reading": False,
            "total": len(rows),
            "offset": offset,
            "sort": sort,
            "desc": desc,
            "columns": snap.columns,
            "rows": rows[offset : offset + limit],
            "taken_at": snap.taken_at,
            "read_s": round(snap.took_s, 4),
        }
