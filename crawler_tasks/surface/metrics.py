"""Crawl-level Prometheus metrics (``crawler metrics --port N``), read from the crawls' Redis
counters at scrape time, to sit beside Flower's own task-level ``/metrics`` in Grafana."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..errors import UnknownCrawl
from ..settings import Settings
from ..state import store as stores
from ..state import workers
from ..state.formats import Counter, Status
from ..state.health import Memory, memory
from ..state.stats import LIVE
from ..state.store import RedisHandle
from .crawl import Crawl

log = logging.getLogger(__name__)

#: Crawls exported: the most recent ones (finished crawls keep their final numbers).
MAX_CRAWLS = 20

#: Counters exported per crawl, with their help text (declared with each Counter).
_COUNTERS = {c.value: c.help for c in Counter if not c.gauge}
#: Gauges exported per crawl: the counters that go down too, and progress() figures.
_GAUGES = {
    **{c.value: c.help for c in Counter if c.gauge},
    **LIVE,
    "recent_pages_per_s": "URLs finished per second, recent",
    "paused": "1 while the crawl is paused (no progress expected: alerts leave it alone)",
}


class CrawlCollector(Collector):
    """Every recent crawl's figures; a finished crawl only for ``metrics_finished_seconds``
    after its end."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.r = RedisHandle.connect(client, settings.key_prefix)

    def _figures(self, crawl_id: str) -> dict[str, Any]:
        crawl = Crawl(crawl_id, settings=self.settings, client=self.client)
        summary = crawl.stats.summary()
        summary["progress"] = crawl.stats.progress()
        final = Status(summary["progress"]["status"]).final
        summary["domains"] = [] if final else crawl.domains(10)
        return summary

    def _shown(self, summary: dict[str, Any]) -> bool:
        ended = summary.get("finished_at") or 0
        return not ended or time.time() - ended <= self.settings.metrics_finished_seconds

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        skipped: list[str] = []  # unreadable options (store.recent): counted with the rest
        ids = stores.recent(self.r, MAX_CRAWLS, skipped)
        counters = {
            n: CounterMetricFamily(f"crawler_{n}", text, labels=["crawl"])
            for n, text in _COUNTERS.items()
        }
        gauges = {
            n: GaugeMetricFamily(f"crawler_{n}", text, labels=["crawl"])
            for n, text in _GAUGES.items()
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
                summary = self._figures(crawl_id)
            except UnknownCrawl:
                continue  # expired since the listing was read
            except Exception:  # one bad crawl must not take the endpoint down for all
                log.warning("crawler metrics: skipped crawl %s", crawl_id, exc_info=True)
                unreadable += 1
                continue
            if not self._shown(summary):
                continue
            p, c = summary["progress"], summary["counters"]
            unwritable.add_metric([crawl_id], 1 if p.get("output") else 0)
            for n in _COUNTERS:
                counters[n].add_metric([crawl_id], c.get(n, 0))
            for n in _GAUGES:  # a progress() figure, or a counter progress() does not show
                gauges[n].add_metric([crawl_id], float(p.get(n, c.get(n, 0))))
            for reason, n in summary["failures"].items():
                failures.add_metric([crawl_id, reason], n)
            for d in summary["domains"]:
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
