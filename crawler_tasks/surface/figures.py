"""A crawl's figures, read in ONE place for everything that shows them: ``crawler status
--json`` and the dashboard's ``/api/crawls/ID`` send the JSON form of :func:`crawl_figures`,
``Crawl.read_progress()`` with its :class:`~crawler_tasks.state.figures.Detail` (the busiest
hosts, the dedupe filter, an on_item queue); the dashboard's crawl page adds what only it shows
(:func:`crawl_page`) around those same figures, and its crawls list (:func:`crawls_list`) is
the progress of each crawl. tests/integration/test_dashboard.py asserts the API and
``status --json`` agree. Each figure is a typed attribute (state/figures.py), never read here
by its name."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

import redis

from ..errors import UnknownCrawl
from ..settings import Settings
from ..state import events, registry, workers
from ..state.figures import Detail, Families, Listed, Progress
from ..state.formats import Counter
from ..state.store import RedisHandle
from .crawl import Crawl

#: Dead letters read for the error breakdown's examples (the counts come from the counters).
EXAMPLES_SCANNED = 2000


def crawl_figures(crawl: Crawl, domains: int = 10) -> Progress:
    """``Crawl.read_progress()`` with the ``domains`` busiest hosts (their pace and why), the
    dedupe filter's fill and an on_item queue's backlog: what ``crawler status`` shows."""
    queue = crawl.options.on_item_queue if crawl.options.on_item else None
    detail = Detail(
        domains=tuple(crawl.domains(domains)),
        bloom=crawl.bloom(),
        on_item=queue is not None,
        on_item_waiting=waiting(crawl.settings, queue) if queue is not None else None,
    )
    return crawl.read_progress(detail)


def waiting(settings: Settings, queue: str) -> int | None:
    """Messages in the broker's ``queue`` (None if the broker cannot tell now). Read with
    kombu's own transport: the dashboard process imports no worker module (whose import
    registers Celery signal handlers and the dispatcher's bootstep)."""
    from kombu import Connection
    from kombu.exceptions import ChannelError

    try:
        with Connection(settings.broker_url, connect_timeout=2) as conn, conn.channel() as ch:
            try:
                return int(ch.queue_declare(queue=queue, passive=True).message_count)
            except ChannelError:  # Redis: an empty list does not exist; AMQP: not declared
                return 0
    except Exception:  # noqa: BLE001 - a figure of status, not worth a failure
        return None


def crawl_page(crawl: Crawl) -> dict[str, Any]:
    """Everything the dashboard's crawl page shows: :func:`crawl_figures` under ``figures``,
    every counter and live figure with its group and help, the status-code and error
    breakdown, the controls that apply, the series, workers seen and the action log."""
    store = crawl.store
    p = crawl_figures(crawl)
    families = Families.of(p.counts)
    live = workers_seen(crawl)
    return {
        "figures": p.to_json(),
        # Every counter and live figure, grouped, with its help (state/figures.py).
        "counters": [row.to_json() for row in p.rows(every=True)],
        "seeds": list(crawl.options.seeds),
        "started_at": crawl.options.started_at,
        "status_codes": dict(families.status_codes),
        "errors": error_classes(crawl, families.failures, p),
        "controls": controls(p),
        "series": store.series.rates(live=not p.final),
        "workers": [w for w in live if w["alive"]],
        # Processes that stopped beating (their heartbeat stays until it expires).
        "workers_gone": sum(1 for w in live if not w["alive"]),
        # Workers admit no new URL above this fraction of maxmemory (the admission line).
        "admission_memory_fraction": crawl.settings.admission_memory_fraction,
        "admission": admission(p),
        "actions": events.actions(crawl.client, store.ck),
    }


def admission(p: Progress) -> dict[str, float | None]:
    """The admission line: its fraction of maxmemory (the setting), in bytes of Redis memory
    and how much of it is used (None: Redis has no maxmemory with noeviction, so no line)."""
    outlook = p.outlook
    assert outlook is not None  # crawl_figures reads it
    return {
        "fraction": outlook.admission_fraction,
        "line_bytes": outlook.admission_line_bytes,
        "reached": outlook.admission_reached,
    }


def controls(p: Progress) -> dict[str, bool]:
    """Which of the page's controls apply now (as the CLI's commands would act): none on a
    finished crawl but a retry of its failed URLs (and the rates, which a retry then uses)."""
    return {
        "pause": not p.final and not p.paused,
        "resume": not p.final and p.paused,
        "cancel": not p.final,
        "retry_failed": p[Counter.FAILED] > 0,
    }


def error_classes(crawl: Crawl, counts: Mapping[str, int], p: Progress) -> list[dict[str, Any]]:
    """Each failure reason (the ``failed:*`` counters, exact), extract errors and URLs whose
    robots.txt could not be read (a crawl of a host that does not answer fails so: nothing
    fetched, and its Errors card must say why), with one example URL and message from the
    dead letters (the first ``EXAMPLES_SCANNED`` read; robots.txt's reason from the state)."""
    examples: dict[str, dict[str, Any]] = {}
    for record in _dead_letters(crawl, EXAMPLES_SCANNED):
        kind = record.get("error") or "extract_error"
        message = record.get("detail") or record.get("extract_error") or record.get("error")
        examples.setdefault(kind, {"url": record.get("url"), "message": message})
    classes = {k: v for k, v in counts.items() if v}
    if p[Counter.EXTRACT_ERRORS]:
        classes["extract_error"] = p[Counter.EXTRACT_ERRORS]
    if p[Counter.ROBOTS_UNREACHABLE]:
        unreachable = Counter.ROBOTS_UNREACHABLE.value
        classes[unreachable] = p[Counter.ROBOTS_UNREACHABLE]
        why = p.state.robots_unreachable_why
        examples.setdefault(unreachable, {"url": None, "message": why})
    return [
        {"class": k, "count": n, **examples.get(k, {"url": None, "message": None})}
        for k, n in sorted(classes.items(), key=lambda kv: -kv[1])
    ]


def _dead_letters(crawl: Crawl, limit: int) -> list[dict[str, Any]]:
    import json

    out: list[dict[str, Any]] = []
    for pk in crawl.store.ck.parts:
        scan = crawl.client.hscan_iter(pk.failed, count=500)
        out += (json.loads(v) for _k, v in itertools.islice(scan, limit - len(out)))
        if len(out) >= limit:
            break
    return out


def workers_seen(crawl: Crawl) -> list[dict[str, Any]]:
    """Every worker process that beat lately, with its heartbeat's age and whether it counts
    as alive (beat within ``worker_dead_seconds``)."""
    now, dead_after = time.time(), crawl.settings.worker_dead_seconds
    beats = workers.beats(crawl.client, crawl.keys)
    return [
        {"worker": w, "age_s": round(now - t, 1), "alive": now - t <= dead_after}
        for w, t in sorted(beats.items())
    ]


def crawls_list(client: redis.Redis, settings: Settings, limit: int = 50) -> list[dict[str, Any]]:
    """The newest crawls for the dashboard's crawls page: each one's progress (the same
    figures as ``crawler status``), seeds and start time, as JSON."""
    r = RedisHandle.connect(client, settings.key_prefix)
    out = []
    for crawl_id in registry.recent(r, limit):
        crawl = Crawl(crawl_id, settings=settings, client=client)
        try:
            p = crawl.read_progress()
        except UnknownCrawl:
            continue  # expired
        opts = crawl.options
        out.append(Listed(crawl_id, p, tuple(opts.seeds), opts.started_at).to_json())
    return out
