"""The figures users read of a crawl, typed: :class:`Progress` while it runs (``crawler
status``, ``watch``, the dashboard, Prometheus, ``Crawl.progress()``) and, once it ends,
:class:`~crawler_tasks.state.summary.Summary` (state/summary.py: ``summary.json``, ``crawler
crawl``'s last words, ``Crawl.wait()``, the ``crawl_finished`` event).

Each is frozen, built in one place (:meth:`~crawler_tasks.state.stats.Stats.progress`, and
``Summary.of`` a Progress) and has ONE JSON form, ``to_json()``, which every view sends,
prints or writes; nothing outside these two modules reads a figure by its key name
(tests/unit/test_figures.py). The counts come from their declarations: every
:class:`~crawler_tasks.state.formats.Counter` and :class:`Live` member is a figure
(``progress[Counter.DONE]``), with its group, help text and where ``progress()`` shows it; a
new one reaches every view without a line here.

Figures a view derives from others (``final``, ``done_share``, the ETA, the pace shown) are
derived here, once, and sent: the dashboard's page derives nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .crawl_state import CrawlState
from .formats import FAMILIES, TLS_NOTE, Counter, Group, Shown, Status, Word
from .watch_figures import Detail, Outlook

#: Seconds of finished-URL counts averaged for the recent pages/s figure.
RATE_WINDOW = 10


class Live(Word):
    """Figures of a crawl that are not counters: read live from its partitions each time
    (state/stats.py, ``Stats.live``), shown between the early and late counters. Declared as
    :class:`Counter` members are (a name, its help text, its group: the frontier's unless
    said), so every view (status, dashboard, Prometheus) takes them from here; all are gauges
    (they go down). Adding one is a member here and its read in ``Stats.live``."""

    _value_: str
    group: Group
    help: str
    gauge: bool

    def __new__(cls, value: str, help: str, group: Group = Group.FRONTIER) -> Live:
        member = str.__new__(cls, value)
        member._value_ = value
        member.group = group
        member.help = help
        member.gauge = True
        return member

    RETRYING = "retrying", "URLs waiting for a retry"
    IN_FLIGHT = "in_flight", "URLs released to workers and not yet final"
    OUTSTANDING = "outstanding", "URLs admitted and not yet final"


#: A figure with a declaration: its name (the value), group, help text and whether a gauge.
Figure = Counter | Live
#: Every declared figure, counters first, each in declaration order.
FIGURES: tuple[Figure, ...] = (*Counter, *Live)
#: The counters progress() shows, before and after the live figures.
EARLY = Counter.shown_in(Shown.EARLY)
LATE = Counter.shown_in(Shown.LATE)


class Row(NamedTuple):
    """One figure as the views list them (status, the summary, the dashboard's counters)."""

    figure: Figure
    value: int

    def to_json(self) -> dict[str, Any]:
        f = self.figure
        return {"name": f.value, "group": f.group.value, "help": f.help, "value": self.value}


def rows(figures: Iterable[Figure], value: Mapping[str, int]) -> list[Row]:
    """``figures`` with their values (a name missing counts 0), in their group's order, then
    declaration order."""
    order = list(Group)
    found = [Row(f, value.get(f.value, 0)) for f in figures]
    return sorted(found, key=lambda r: order.index(r.figure.group))  # stable


class Families(NamedTuple):
    """The counter families as ``summary.json`` names them (formats.FAMILIES: ``status:200``
    counts under ``status_codes``), each ``{name: count}``; a 0 left by retry_failed() (it
    takes replayed URLs off their failure counters) is dropped."""

    status_codes: Mapping[str, int]
    failures: Mapping[str, int]
    skipped: Mapping[str, int]
    changes: Mapping[str, int]

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> Families:
        found: dict[str, dict[str, int]] = {name: {} for name in FAMILIES.values()}
        for k, v in counts.items():
            family, _, rest = k.partition(":")
            if rest and family in FAMILIES and v:
                found[FAMILIES[family]][rest] = v
        found["status_codes"] = dict(sorted(found["status_codes"].items()))
        return cls(**found)


def failed(error: str | None, counts: Mapping[str, int]) -> bool:
    """Stopped by an error of its setup (a hook no worker can import), or every URL that
    reached a final state failed (a mistyped port, a private CA the workers were not given,
    robots.txt unreachable, every page's render failed): a crawl that must not look like a
    success to a script (its exit code, Summary.failed) or to a person (the dashboard's
    badge, Progress.shown_status). Judged by the URLs' outcomes, not by what was fetched: a
    URL fetched and then failed (its render, its body lost) is a failed URL like one never
    fetched (issue 50: a crawl whose one page's render failed exited 0, "1 fetched"). URLs
    robots.txt disallows and URLs a cancel dropped are no failures (``done`` counts neither of
    the latter, state/stats.py)."""
    if error:
        return True
    gave_up = counts.get(Counter.FAILED.value, 0) + counts.get(Counter.ROBOTS_UNREACHABLE.value, 0)
    return gave_up > 0 and gave_up >= counts.get(Counter.DONE.value, 0)


@dataclass(frozen=True)
class Progress:
    """A crawl's figures now (:meth:`Stats.progress` builds it; ``Crawl.progress()`` is its
    JSON form). ``progress[figure]`` reads a count: a :class:`Counter` (the stats hashes, ``done``
    without what a cancel dropped) or a :class:`Live` figure."""

    crawl_id: str
    state: CrawlState
    #: Every field of the stats hashes, summed over the partitions (families too).
    counts: Mapping[str, int]
    live: Mapping[str, int]
    #: Seconds from its start to its end (to now while it runs; 0 before it started).
    elapsed: float
    #: URLs finished per second over the last RATE_WINDOW s, as counted.
    recent_rate: float
    #: The crawl's max_pages (0: none): what is left of it bounds the ETA.
    max_pages: int
    #: What keeps its output from being written lately ("disk full at DIR"), if anything.
    output: str | None
    outlook: Outlook | None = None
    detail: Detail | None = None

    def __getitem__(self, figure: Figure) -> int:
        values = self.live if isinstance(figure, Live) else self.counts
        return values.get(figure.value, 0)

    @property
    def status(self) -> Status:
        return self.state.status

    @property
    def paused(self) -> bool:
        return self.state.paused

    @property
    def final(self) -> bool:
        """Finished or cancelled: nothing will change any more."""
        return self.status.final

    @property
    def failed(self) -> bool:
        """Over, and a failure (:func:`failed`): nothing fetched, or its setup failed."""
        return self.final and failed(self.state.error, self.counts)

    @property
    def shown_status(self) -> str:
        """The status a person is shown: ``failed`` for a crawl over that :attr:`failed`
        (not a green ``finished``), else its status."""
        return "failed" if self.failed else self.status.value

    @property
    def paced(self) -> bool:
        """Whether a pace (pages/s, an ETA) means anything: not while a cancel settles (URLs
        are counted cancelled, not fetched) nor for a crawl over that fetched nothing."""
        if self.status is Status.CANCELLING:
            return False
        return not self.final or self[Counter.FETCHED] > 0

    @property
    def elapsed_s(self) -> float:
        return round(self.elapsed, 3)

    @property
    def pages_per_s(self) -> float:
        """Final URLs per second over the whole crawl."""
        done, elapsed = self[Counter.DONE], self.elapsed
        return round(done / elapsed, 2) if elapsed else 0.0

    @property
    def recent_pages_per_s(self) -> float:
        """Pages/s of the last RATE_WINDOW s: a young crawl has not lived that long yet."""
        if 0 < self.elapsed_s < RATE_WINDOW and not self.final:
            return self.recent_rate * RATE_WINDOW / max(self.elapsed_s, 1.0)
        return self.recent_rate

    @property
    def pace(self) -> float | None:
        """Pages/s to show: of the last seconds while running, of the whole crawl once over;
        None when there is none to show (:attr:`paced`)."""
        if not self.paced:
            return None
        return self.pages_per_s if self.final else self.recent_pages_per_s

    @property
    def eta_s(self) -> float | None:
        """Seconds to the end of the work known now at the recent pace (outstanding is exact;
        links found later add to it), None when nothing moves or nothing will. None for a
        crawl being cancelled: what it drains is given up, not fetched (issue 50); and where
        no pace means anything (:attr:`paced`)."""
        rate = self.recent_pages_per_s
        if rate <= 0 or self.paused or self.final or self.state.cancelled or not self.paced:
            return None
        outstanding = self[Live.OUTSTANDING]
        max_pages = self.max_pages
        left = max(max_pages - self[Counter.DONE], 0) if max_pages else outstanding
        return round(min(left, outstanding) / rate, 1)

    @property
    def done_share(self) -> float:
        """The share of admitted URLs that are final (0 to 1; the progress bars)."""
        admitted = self[Counter.ADMITTED]
        return min(1.0, self[Counter.DONE] / admitted) if admitted else 0.0

    def rows(self, every: bool = False) -> list[Row]:
        """The figures progress() shows (``every``: also the counters it does not)."""
        shown = FIGURES if every else (*EARLY, *Live, *LATE)
        return rows(shown, {**self.counts, **self.live})

    def to_json(self) -> dict[str, Any]:
        """The one JSON form: ``crawler status --json``, ``/api/crawls/ID``, each line of
        ``watch --json``, ``Crawl.progress()``."""
        state = self.state
        out: dict[str, Any] = {
            "crawl_id": self.crawl_id,
            "status": state.status.value,
            "paused": state.paused,
            **{c.value: self[c] for c in EARLY},
            **{f.value: self[f] for f in Live},
            **{c.value: self[c] for c in LATE},
            "shown_status": self.shown_status,
            "elapsed_s": self.elapsed_s,
            # null when no pace means anything (cancelling, or over with nothing fetched).
            "pages_per_s": self.pages_per_s if self.paced else None,
            "recent_pages_per_s": self.recent_pages_per_s if self.paced else None,
            "pace": self.pace,
            "output": self.output,
            "error": state.error,
            TLS_NOTE: state.tls_error_why,
        }
        if self.eta_s is not None:
            out["eta_s"] = self.eta_s
        out["final"] = self.final
        out["done_share"] = self.done_share
        out["summary_path"] = state.summary_path
        # The host whose disk holds it (a local path means nothing on another machine).
        out["summary_host"] = state.summary_host
        for section in (self.outlook, self.detail):
            if section is not None:
                out.update(section.to_json())
        return out


@dataclass(frozen=True)
class Listed:
    """One crawl of a listing (``crawler list``, the dashboard's crawls page): its progress,
    seeds and start; or, for one that cannot be read, why (``unreadable``)."""

    crawl_id: str
    progress: Progress | None = None
    seeds: tuple[str, ...] = ()
    started_at: float = 0.0
    unreadable: str | None = None
    #: When it was listed (unix seconds): the crawl's age is counted to then.
    at: float = field(default_factory=time.time)

    @property
    def age_s(self) -> float:
        return max(0.0, self.at - self.started_at)

    def to_json(self) -> dict[str, Any]:
        if self.progress is None:
            return {"crawl_id": self.crawl_id, "unreadable": self.unreadable}
        return {
            **self.progress.to_json(),
            "seeds": list(self.seeds),
            "started_at": self.started_at,
            "age_s": round(self.age_s, 1),
        }
