"""The dispatcher releases only what the fetch pools can start: while the broker's fetch
queues already hold ``dispatch_queue_max`` messages (every pool slot taken), a released host
would wait behind other hosts' messages, so nothing more is released; a free slot takes a
message of up to ``fetch_batch`` URLs. In-process (driver)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from crawler_tasks import Crawl, start_crawl
from crawler_tasks.settings import Settings
from crawler_tasks.worker.dispatch import rounds as rounds_module
from tests.support.driver import Driver
from tests.support.round_trips import RoundTrips


@contextlib.contextmanager
def seeded(
    settings: Settings, hosts: int, **overrides: Any
) -> Iterator[tuple[Crawl, Driver, list[str]]]:
    """A crawl of ``hosts`` seeds, one per host, a driver whose dispatcher releases them, and
    the seeds. Nothing is fetched here: the hosts need no server."""
    settings = dataclasses.replace(settings, **overrides)
    seeds = [f"http://127.0.0.{i}:8000/" for i in range(120, 120 + hosts)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True, rate=math.inf)
    driver = Driver(settings)
    try:
        yield crawl, driver, seeds
    finally:
        driver.close()


def test_nothing_released_while_the_fetch_queues_are_full(settings, client):  # type: ignore[no-untyped-def]
    with seeded(settings, 12, dispatch_queue_max=5, fetch_batch=1) as (crawl, driver, seeds):
        client.rpush("crawl.high", *["waiting"] * 5)  # five messages no pool took yet
        driver.dispatcher.tick()
        assert driver.published == []
        client.ltrim("crawl.high", 0, 1)  # three slots freed
        driver.dispatcher.tick()
        assert len(driver.published) == 3
        client.delete("crawl.high")
        driver.dispatcher.tick()
        assert len(driver.published) == 8  # one round: at most the budget (5)
        assert len({url for _c, url, _d, _q in driver.published}) == 8
        assert crawl.progress()["queued"] == len(seeds) - 8


def test_urls_released_together_share_a_message_of_fetch_batch(settings, client):  # type: ignore[no-untyped-def]
    with seeded(settings, 14, dispatch_queue_max=5, fetch_batch=4) as (crawl, driver, seeds):
        client.rpush("crawl.high", *["waiting"] * 3)  # two free slots: two messages of four
        driver.dispatcher.tick()
        assert driver.batches == [4, 4]
        client.delete("crawl.high")
        driver.dispatcher.tick()
        assert driver.batches == [4, 4, 4, 2]  # the rest: never more than four to a message
        assert sorted(url for _c, url, _d, _q in driver.published) == sorted(seeds)
        assert crawl.progress()["queued"] == 0


def test_a_fetch_rate_limit_sends_one_url_per_message(settings):  # type: ignore[no-untyped-def]
    # Celery's rate_limit counts messages: a batch would multiply the user's cap.
    assert (
        dataclasses.replace(settings, fetch_batch=4, fetch_rate_limit="10/s").urls_per_message == 1
    )
    assert dataclasses.replace(settings, fetch_batch=4).urls_per_message == 4


def test_a_round_reads_its_crawls_steering_with_the_survey(settings, client, monkeypatch):  # type: ignore[no-untyped-def]
    # The cluster's rates and the host holders are read again once a second: on a loaded
    # machine two ticks can be a second apart (the suite's 6 processes on 2 cores: 5 round
    # trips instead of 2, once), and that refresh is not what this test counts.
    monkeypatch.setattr(rounds_module, "REFRESH_EVERY", 3600.0)
    with seeded(settings, 12, dispatch_queue_max=2, fetch_batch=1) as (crawl, driver, seeds):
        rounds, ctx = driver.dispatcher.rounds, driver.ctx
        rounds.tick(ctx)  # learns the running crawls (and the cluster's rates: once a second)
        assert len(driver.published) == 2
        client.delete("crawl.high")
        with RoundTrips() as trips:
            rounds.tick(ctx)
        # The survey (queues, crawls, steering), then release.lua: two round trips.
        assert trips.count == 2
        assert len(driver.published) == 4
        client.delete("crawl.high")
        crawl.pause()  # read by the next round's survey: nothing released
        rounds.tick(ctx)
        assert len(driver.published) == 4
        crawl.resume()
        rounds.tick(ctx)
        assert len(driver.published) == 6
