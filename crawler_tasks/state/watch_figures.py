"""What a person watching a crawl reads beside its counts, typed: :class:`Outlook` (the busiest
hosts' backlog and those down, Redis's memory against the admission line, render=auto's
decisions, uploads waiting; ``Crawl.progress()``) and :class:`Detail` (what ``crawler status``
and the dashboard's crawl page add). Both ride in a :class:`~crawler_tasks.state.figures.Progress`
and have ONE JSON form, ``to_json()``, as the figures do (state/figures.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .health import Memory
from .segments import Waiting


class HostDown(NamedTuple):
    """One of the busiest hosts whose circuit is open: since when, next probe in how long."""

    domain: str
    down_since: float
    next_probe_s: float


@dataclass(frozen=True)
class Outlook:
    """What a person watching a crawl reads beside its counts (``Crawl.progress()``; read by
    state/outlook.py): the busiest hosts' backlog and those of them that are down, Redis's
    memory against the admission line, and render=auto's decision per host."""

    #: (host, pending URLs) of the busiest hosts, most pending first.
    backlog: tuple[tuple[str, int], ...]
    hosts_down: tuple[HostDown, ...]
    #: None: no maxmemory with noeviction, so no line to be near (state/health.py).
    memory: Memory | None
    #: Workers admit no new URL above this fraction of maxmemory (the setting).
    admission_fraction: float
    #: host -> its render plan entry (mode, pages, renders, gains: state/render_plan.py).
    render_hosts: Mapping[str, Mapping[str, Any]]
    #: An s3:// crawl's segments not yet uploaded (state/segments.py); None: local output.
    uploads: Waiting | None = None

    @property
    def redis_oom(self) -> bool:
        """Redis itself refuses writes (workers wait and cannot record why)."""
        return self.memory is not None and self.memory.refuses_writes()

    @property
    def admission_paused(self) -> bool:
        return self.memory is not None and self.memory.over(self.admission_fraction)

    @property
    def admission_line_bytes(self) -> int | None:
        """Where admission pauses, in bytes of Redis memory (None: no maxmemory)."""
        if self.memory is None:
            return None
        return int(self.memory.maxmemory * self.admission_fraction)

    @property
    def admission_reached(self) -> float | None:
        """Redis's memory used as a share of the admission line (1: admission pauses)."""
        line = self.admission_line_bytes
        return self.memory.used / line if self.memory is not None and line else None

    def to_json(self) -> dict[str, Any]:
        return {
            "backlog": list(self.backlog),
            "hosts_down": [h._asdict() for h in self.hosts_down],
            "redis_oom": self.redis_oom,
            "admission_paused": self.admission_paused,
            "redis_memory": self.memory.as_dict() if self.memory is not None else None,
            "render_hosts": dict(self.render_hosts),
            # Only an s3:// crawl's: a local crawl's form is as it was.
            **({"uploads": self.uploads.to_json()} if self.uploads is not None else {}),
        }


@dataclass(frozen=True)
class Detail:
    """What ``crawler status`` adds (and the dashboard's crawl page): the busiest hosts with
    their pace and why (politeness's rows), the dedupe filter's fill, and the batches of an
    on_item task waiting in its queue (``on_item``: the crawl has one)."""

    domains: tuple[Mapping[str, Any], ...]
    bloom: Mapping[str, float]
    on_item: bool = False
    #: None: the broker could not tell now.
    on_item_waiting: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"domains": list(self.domains), "bloom": dict(self.bloom)}
        if self.on_item:
            out["on_item_waiting"] = self.on_item_waiting
        return out
