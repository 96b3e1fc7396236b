"""The walk of one URL stays short (issue 47): one HTML page's trip from its fetch task to its
final record enters at most so many of the steps' functions (``worker/visit/`` and
``worker/runtime/``), read from the code that runs (tests/support/walk.py), in process
(tests/support/driver.py) against the real Redis and a real local server. A page parsed in its
fetch task (the common case) and one whose body goes to a parse task (larger than
``inline_parse_bytes``): the trip of the second spans both tasks. The page is a host's second
(its robots.txt read by the first), as for every page of a host but one.

A step added to the walk is a stop more; to pass again it replaces one, or the bound is raised
here, where a reviewer sees it. ``pytest -s`` prints the figures of every scope and the stops.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.worker.runtime import send_gate
from crawler_tasks.worker.visit import pipeline
from tests.support.driver import Driver
from tests.support.sitegen import Handler, SiteServer
from tests.support.walk import Walk, traced

HOST = "127.0.0.47"
#: (stops, return points) of the steps at most, per kind of trip (tests/support/walk.py).
BOUNDS = {"parsed-in-fetch": (29, 9), "parse-task": (34, 12)}


def page(*links: str):  # type: ignore[no-untyped-def]
    body = "".join(f'<a href="{link}">{link}</a>' for link in links)
    html = f"<html><head><title>t</title></head><body>{body}</body></html>".encode()

    def send(h: Handler) -> None:
        h.send_body(200, html)

    return send


ROUTES = {
    "/": page("/a"),
    "/a": page("/b", "/c", "/"),
    "/b": page(),
    "/c": page(),
    "/robots.txt": lambda h: h.send_body(200, b"User-agent: *\nDisallow: /x\n", "text/plain"),
}


def trip_of(settings, path: str) -> Walk:  # type: ignore[no-untyped-def]
    """The walk of ``path``'s trip in a crawl of the site from "/"."""
    driver = Driver(settings)
    try:
        with SiteServer(address=HOST, extra_routes=ROUTES) as site:
            seed, target = site.base_url + "/", site.base_url + path
            crawl = start_crawl(
                [seed], settings=settings, allow_private_networks=True, rate=math.inf
            )

            def wanted(_ctx, _crawl_id, url, *_rest) -> bool:  # type: ignore[no-untyped-def]
                return bool(url == target)

            with (
                traced(pipeline, "fetch_url", wanted) as tracer,
                traced(pipeline, "parse_url", wanted) as parse_tracer,
            ):
                parse_tracer.walk = tracer.walk  # one trip across both tasks
                driver.run(crawl, timeout=60)
    finally:
        driver.close()
    [record] = [r for r in crawl.pages(latest=False) if r["url"] == target]
    assert record["error"] is None, record
    assert sorted(record["outlinks"]) == sorted(site.base_url + p for p in ("/", "/b", "/c"))
    assert tracer.walk.stops, "the trip was not traced: the test checked nothing"
    return tracer.walk


@pytest.mark.parametrize("kind", list(BOUNDS))
def test_one_pages_walk_stays_short(settings, kind, monkeypatch):  # type: ignore[no-untyped-def]
    # A page sent late after its slot (its thread starved: the suite's load) asks the gates
    # again (SendSlot's late branches, past LATE or LATE_SHARED): one stop more, seen once in
    # make test (49 > 48). The walk counts the trip's structure, not the machine's load.
    monkeypatch.setattr(send_gate, "LATE", math.inf)
    monkeypatch.setattr(send_gate, "LATE_SHARED", math.inf)
    if kind == "parse-task":
        settings = dataclasses.replace(settings, inline_parse_bytes=1)
    walk = trip_of(settings, "/a")
    steps = walk.within("steps")
    print(f"\nwalk of one page ({kind}), (stops, return points) per scope: {walk.figures()}")
    print("\n".join(f"  {stop} -> {', '.join(steps.calls[stop])}" for stop in steps.stops))
    most_stops, most_returns = BOUNDS[kind]
    assert len(steps.stops) <= most_stops, steps.stops
    assert len(steps.return_points) <= most_returns, steps.return_points
