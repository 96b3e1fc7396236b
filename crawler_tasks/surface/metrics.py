"""Crawl-level Prometheus metrics (``crawler metrics --port N``), read from the crawls' Redis
counters at scrape time, to sit beside Flower's own task-level ``/metrics`` in Grafana."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..errors import UnknownCrawl
from ..settings import Settings
from ..state import registry, workers
from ..state.figures import FIGURES, Families, Progress
from ..state.health import Memory, memory
from ..state.store import RedisHandle
from .crawl import Crawl

log = logging.getLogger(__name__)

#: Crawls exported: the most recent ones (finished crawls keep their final numbers).
MAX_CRAWLS = 20

#: Counters exported per crawl, with their help text (declared with each figure: formats.Counter).
_COUNTERS = {f.value: f.help for f in FIGURES if not f.gauge}
#: Gauges exported per crawl: the counters that go down too and the live figures
#: (state/figures.Live), declared with each ...
_GAUGES = {f.value: f.help for f in FIGURES if f.gauge}
#: ... and the progress figures that are not counts, with how each is read.
_PACE: dict[str, tuple[str, Callable[[Progress], float]]] = {
    "recent_pages_per_s": ("URLs finished per second, recent", lambda p: p.recent_pages_per_s),
    "paused": (
        "1 while the crawl is paused (no progress expected: alerts leave it alone)",
        lambda p: float(p.paused),
    ),
}


class CrawlCollector(Collector):
    """Every recent crawl's figures; a finished crawl only for ``metrics_finished_seconds``
    after its end."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.r = RedisHandle.connect(client, settings.key_prefix)

    def _figures(self, crawl_id: str) -> tuple[Progress, list[dict[str, Any]]]:
        """The crawl's progress and, while it runs, its busiest hosts."""
        crawl = Crawl(crawl_id, settings=self.settings, client=self.client)
        p = crawl.stats.progress()
        return p, [] if p.final else crawl.domains(10)

    def _shown(self, p: Progress) -> bool:
        ended = p.state.finished_at or 0
        return not ended or time.time() - ended <= self.settings.metrics_finished_seconds

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        skipped: list[str] = []  # unreadable options (registry.recent): counted with the rest
        ids = registry.recent(self.r, MAX_CRAWLS, skipped)
        counters = {
            n: CounterMetricFamily(f"crawler_{n}", text, labels=["crawl"])
            for n, text in _COUNTERS.items()
        }
        gauges = {
            n: GaugeMetricFamily(f"crawler_{n}", text, labels=["crawl"])
            for n, text in {**_GAUGES, **{n: text for n, (text, _) in _PACE.items()}}.items()
        }
        failures = CounterMetricFamily(
            "crawler_failures", "final failures by reason", labels=["crawl", "reason"]
        )
        backlog = GaugeMetricFamily(
            "crawler_domain_backlog", "pending URLs per domain (top 10)", labels=["crawl", "domain"]
        )
        rate = GaugeMetricFamily(
            "crawler_domain_rate", "effective requests/s per domain", labels=["crawl", "domain"]
        )
        unwritable = GaugeMetricFamily(
            "crawler_output_unwritable",
            "1 while the crawl's output cannot be written (disk full...): releases pause",
            labels=["crawl"],
        )
        for why in skipped:
            log.warning("crawler metrics: skipped: %s", why)
        unreadable = len(skipped)
        for crawl_id in ids:
            try:
                p, domains = self._figures(crawl_id)
            except UnknownCrawl:
                continue  # expired since the listing was read
            except Exception:  # one bad crawl must not take the endpoint down for all
                log.warning("crawler metrics: skipped crawl %s", crawl_id, exc_info=True)
                unreadable += 1
                continue
            if not self._shown(p):
                continue
            unwritable.add_metric([crawl_id], 1 if p.output else 0)
            for f in FIGURES:
                (gauges if f.gauge else counters)[f.value].add_metric([crawl_id], p[f])
            for name, (_, read) in _PACE.items():
                gauges[name].add_metric([crawl_id], read(p))
            for reason, n in Families.of(p.counts).failures.items():
                failures.add_metric([crawl_id, reason], n)
            for d in domains:
                backlog.add_metric([crawl_id, d["domain"]], d["pending"])
                rate.add_metric([crawl_id, d["domain"]], d["rate"])
        yield from counters.values()
        yield unwritable
        yield GaugeMetricFamily(
            "crawler_unreadable_crawls",
            "crawls skipped because their state could not be read (the exporter's log says why)",
            value=unreadable,
        )
        yield from gauges.values()
        mem = memory(self.client)
        yield GaugeMetricFamily(
            "crawler_redis_refuses_writes",
            "1 while Redis is at maxmemory (noeviction) and every crawl waits",
            value=int(mem is not None and mem.refuses_writes()),
        )
        yield GaugeMetricFamily(
            "crawler_admission_paused",
            "1 while Redis is above admission_memory_fraction of maxmemory: no new URL admitted",
            value=int(mem is not None and mem.over(self.settings.admission_memory_fraction)),
        )
        yield failures
        yield backlog
        yield rate
        yield from self._cluster(mem)

    def _cluster(self, mem: Memory | None) -> Iterator[GaugeMetricFamily]:
        """Figures of the whole cluster the alert rules (config/alerts.yml) need: workers
        beating, Redis memory against maxmemory and the admission line."""
        now, beats = time.time(), workers.beats(self.client, self.r.keys)
        alive = sum(1 for t in beats.values() if now - t <= self.settings.worker_dead_seconds)
        yield GaugeMetricFamily(
            "crawler_workers_alive",
            "worker processes whose heartbeat is younger than worker_dead_seconds",
            value=alive,
        )
        yield GaugeMetricFamily(
            "crawler_admission_memory_fraction",
            "fraction of Redis maxmemory from which workers admit no new URLs (the setting)",
            value=self.settings.admission_memory_fraction,
        )
        if mem is None:  # no maxmemory with noeviction: no line to be near
            return
        yield GaugeMetricFamily(
            "crawler_redis_used_bytes", "Redis memory used (the fullest master)", value=mem.used
        )
        yield GaugeMetricFamily(
            "crawler_redis_maxmemory_bytes",
            "Redis maxmemory (noeviction) of the fullest master",
            value=mem.maxmemory,
        )
