"""One bad crawl in Redis (an older version's config, a bug) never breaks `crawler list` or the
Prometheus exporter for everyone: it is skipped and named. Finished crawls leave the exporter
after ``metrics_finished_seconds``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

from prometheus_client import CollectorRegistry, generate_latest

from crawler_tasks import start_crawl
from crawler_tasks.state.keys import Keys
from crawler_tasks.state.options import CrawlOptions
from crawler_tasks.surface.metrics import CrawlCollector
from tests.support.sitegen import running_sites


def poison(client, settings) -> str:  # type: ignore[no-untyped-def]
    """A crawl whose stored options no longer validate (a URL as an allowed domain)."""
    opts = CrawlOptions(crawl_id="bad-crawl", seeds=("http://127.0.0.1:8600/",), started_at=1.0)
    data = json.loads(opts.to_json())
    data["allowed_domains"] = ["http://127.0.0.1:8600/"]
    keys = Keys(settings.key_prefix)
    client.set(keys.crawl("bad-crawl").config, json.dumps(data))
    client.zadd(keys.crawls, {"bad-crawl": 2e9})
    return "bad-crawl"


def scrape(client, settings) -> str:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    registry.register(CrawlCollector(client, settings))
    return generate_latest(registry).decode()


def test_a_bad_crawl_is_skipped_and_named(settings, driver, client):  # type: ignore[no-untyped-def]
    with running_sites(["127.0.0.77"], 6, 3) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True,
            rate=math.inf,
        )  # fmt: skip
        driver.run(crawl)
    bad = poison(client, settings)
    listed = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "list", "--broker", settings.broker_url],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert crawl.id in listed.stdout and bad not in listed.stdout
    assert listed.stderr.startswith(f"skipped: crawl {bad}"), listed.stderr
    text = scrape(client, settings)
    assert f'crawler_done_total{{crawl="{crawl.id}"}}' in text
    assert "crawler_unreadable_crawls 1.0" in text
    # Finished longer ago than metrics_finished_seconds: its series stop.
    gone = scrape(client, dataclasses.replace(settings, metrics_finished_seconds=0.0))
    assert crawl.id not in gone
