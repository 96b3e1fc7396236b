"""Crawl-level Prometheus metrics (``crawler metrics --port N``), read from the crawls' Redis
counters at scrape time, to sit beside Flower's own task-level ``/metrics`` in Grafana."""

from __future__ import annotations

from collections.abc import Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..settings import Settings
from ..state.health import memory
from ..state.keys import Keys
from .crawl import Crawl

#: Crawls exported: the most recent ones (finished crawls keep their final numbers).
MAX_CRAWLS = 20

#: Counters exported per crawl, with their help text.
_COUNTERS = {
    "discovered": "links found in fetched pages",
    "admitted": "URLs admitted to the frontier",
    "deduplicated": "links dropped as already seen",
    "fetched": "URLs fetched (any HTTP status)",
    "parsed": "pages parsed",
    "failed": "URLs that failed for good",
    "robots_disallowed": "URLs not fetched: disallowed by robots.txt",
    "robots_unreachable": "URLs not fetched: robots.txt unreachable",
    "cancelled": "URLs dropped unfetched by a cancel",
    "bytes": "bytes of response bodies fetched",
    "done": "URLs that reached a final state",
    "items": "items returned by the crawl's extraction hook",
    "extract_errors": "pages whose extraction hook (or on_item send) failed",
}
_GAUGES = {
    "queued": "URLs waiting in the frontier",
    "in_flight": "URLs released to workers and not yet final",
    "outstanding": "URLs admitted and not yet final",
    "retrying": "URLs waiting for a retry",
    "recent_pages_per_s": "URLs finished per second, recent",
}


class CrawlCollector(Collector):
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        ids = [i.decode() for i in self.client.zrevrange(self.keys.crawls, 0, MAX_CRAWLS - 1)]
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
        for crawl_id in ids:
            crawl = Crawl(crawl_id, settings=self.settings, client=self.client)
            p = crawl.state.progress()
            c = crawl.state.counters()
            for n in _COUNTERS:
                counters[n].add_metric([crawl_id], c.get(n, 0))
            for n in _GAUGES:
                gauges[n].add_metric([crawl_id], p.get(n, 0))
            for reason, n in crawl.state.summary()["failures"].items():
                failures.add_metric([crawl_id, reason], n)
            if p["status"] not in ("finished", "cancelled"):
                for d in crawl.domains(10):
                    backlog.add_metric([crawl_id, d["domain"]], d["pending"])
                    rate.add_metric([crawl_id, d["domain"]], d["rate"])
        yield from counters.values()
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
