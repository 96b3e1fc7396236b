"""The dispatcher releases only what the fetch pools can start: while the broker's fetch
queues already hold ``dispatch_queue_max`` messages (every pool slot taken), a released host
would wait behind other hosts' messages, so nothing more is released; in-process (driver)."""

from __future__ import annotations

import dataclasses
import math

from driver import Driver

from crawler_tasks import start_crawl


def test_nothing_released_while_the_fetch_queues_are_full(settings, client):  # type: ignore[no-untyped-def]
    settings = dataclasses.replace(settings, dispatch_queue_max=5)
    # Nothing is fetched here: the hosts need no server.
    seeds = [f"http://127.0.0.{i}:8000/" for i in range(120, 132)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True, rate=math.inf)
    driver = Driver(settings)
    try:
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
    finally:
        driver.close()
