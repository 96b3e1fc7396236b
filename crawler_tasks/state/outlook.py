"""The :class:`~crawler_tasks.state.figures.Outlook` of a crawl, read from its store: what a
person watching it reads beside the counts (``Crawl.progress()``, ``crawler status``, the
dashboard)."""

from __future__ import annotations

from . import objects, workers
from .formats import RenderMode
from .frontier import backlog as busiest
from .health import memory
from .segments import Segments, Waiting
from .store import CrawlStore
from .watch_figures import HostDown, Outlook

#: Busiest hosts in the backlog (and checked for an open circuit).
BACKLOG_HOSTS = 5


def read_outlook(store: CrawlStore, admission_fraction: float, dead_after: float = 10.0) -> Outlook:
    """``admission_fraction``: the process's ``admission_memory_fraction`` setting;
    ``dead_after``: its ``worker_dead_seconds`` (a stranded segment's host runs no worker)."""
    backlog = tuple(busiest(store.client, store.ck, BACKLOG_HOSTS))
    opts = store.opts
    # render="auto": each host's decision and its evidence (state/render_plan.py).
    renders = opts.render != RenderMode.NEVER or opts.render_hosts
    return Outlook(
        backlog=backlog,
        hosts_down=hosts_down(store, [d for d, _ in backlog]),
        # Workers wait (and cannot record why) while Redis is full: ask Redis itself.
        memory=memory(store.client),
        admission_fraction=admission_fraction,
        render_hosts=store.render_plan.hosts() if renders else {},
        uploads=_uploads(store, dead_after),
    )


def _uploads(store: CrawlStore, dead_after: float) -> Waiting | None:
    """An s3:// crawl's segments waiting for their upload, and those stranded."""
    if not objects.is_url(store.opts.output):
        return None
    alive = workers.alive(store.client, store.r.keys, dead_after)
    return Segments(store.client, store.r.keys, store.id).waiting(alive)


def hosts_down(store: CrawlStore, names: list[str]) -> tuple[HostDown, ...]:
    """Of the hosts ``names``, those whose circuit is open: since when, next probe when."""
    return tuple(
        HostDown(d["domain"], d["down_since"], d["next_probe_s"])
        for d in store.politeness.domains(names)
        if d["down_since"] is not None
    )
