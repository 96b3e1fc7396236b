"""A crawl's :class:`Summary`, typed: what ``summary.json`` holds (the finishing worker writes
its JSON form), ``crawler crawl`` prints (with :class:`Notes` for its reader), ``Crawl.wait()``
returns and the ``crawl_finished`` event carries. Built once, :meth:`Summary.of` a crawl's
:class:`~crawler_tasks.state.figures.Progress`; read back from the file by
:meth:`Summary.from_json`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .figures import Families, Progress, Row, failed, rows
from .formats import FAMILIES, TLS_NOTE, Counter, Status


@dataclass(frozen=True)
class Notes:
    """What ``crawler crawl`` adds to a summary for its reader (never in summary.json): where
    the files are, why this command's CA did not help, the first extraction error and the
    first failure (from the dead letters). In the JSON form only when given."""

    output_dir: str | None = None
    tls_hint: str | None = None
    first_extract_error: str | None = None
    first_failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Summary:
    """What ``summary.json`` holds (:meth:`of` a crawl's progress; :meth:`from_json` of the
    file): totals, duration, rate and histograms. ``summary[Counter.DONE]`` reads a counter."""

    crawl_id: str
    status: Status
    started_at: float
    finished_at: float | None
    duration_s: float
    pages_per_s: float
    error: str | None
    robots_unreachable_why: str | None
    tls_error_why: str | None
    #: The counters as stored (a family's are in ``families``): one never counted is absent.
    counters: Mapping[str, int]
    families: Families
    #: What ``crawler crawl`` adds for its reader (never in summary.json).
    notes: Notes = Notes()

    def __getitem__(self, counter: Counter) -> int:
        return self.counters.get(counter.value, 0)

    @classmethod
    def of(cls, p: Progress) -> Summary:
        state = p.state
        return cls(
            crawl_id=p.crawl_id,
            status=state.status,
            started_at=state.started_at,
            finished_at=state.finished_at or None,
            duration_s=p.elapsed_s,
            pages_per_s=p.pages_per_s,
            error=state.error,
            robots_unreachable_why=state.robots_unreachable_why,
            tls_error_why=state.tls_error_why,
            counters={k: v for k, v in p.counts.items() if ":" not in k},
            families=Families.of(p.counts),
        )

    @property
    def failed(self) -> bool:
        return failed(self.error, self.counters)

    def rows(self) -> list[Row]:
        """Every counter (none of the live figures: they are 0 at the end)."""
        return rows(Counter, self.counters)

    def to_json(self) -> dict[str, Any]:
        """The one JSON form: ``summary.json``, ``crawler crawl --json``, ``Crawl.summary()``
        and ``wait()``, the ``crawl_finished`` event and the on_finished task's argument."""
        out: dict[str, Any] = {
            "crawl_id": self.crawl_id,
            "status": self.status.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            "pages_per_s": self.pages_per_s,
            "error": self.error,
            "robots_unreachable_why": self.robots_unreachable_why,
            TLS_NOTE: self.tls_error_why,
            "counters": dict(self.counters),
            **{name: dict(v) for name, v in self.families._asdict().items()},
        }
        out.update(self.notes.to_json())
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Summary:
        """A ``summary.json`` read back (one written before a figure was added lacks it)."""
        families = {name: data.get(name) or {} for name in Families._fields}
        counts = {
            f"{prefix}:{k}": v
            for prefix, name in FAMILIES.items()
            for k, v in families[name].items()
        }
        return cls(
            crawl_id=data["crawl_id"],
            status=Status(data["status"]),
            started_at=data.get("started_at") or 0.0,
            finished_at=data.get("finished_at"),
            duration_s=data.get("duration_s") or 0.0,
            pages_per_s=data.get("pages_per_s") or 0.0,
            error=data.get("error"),
            robots_unreachable_why=data.get("robots_unreachable_why"),
            tls_error_why=data.get(TLS_NOTE),
            counters=dict(data.get("counters") or {}),
            families=Families.of(counts),
            notes=Notes(**{f.name: data.get(f.name) for f in dataclasses.fields(Notes)}),
        )
