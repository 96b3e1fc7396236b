"""When a response's lease goes back (settle._responded): with the URL's finish, in one round
trip, unless its host's next URL waits for that very slot (release.lua's "aw": every slot
taken and the token there). Real fetch and parse processes, a real HTTP server."""

from __future__ import annotations

import math

from crawler_tasks import start_crawl
from crawler_tasks.surface.embedded import local_workers
from tests.support.paths import HOOKS
from tests.support.sitegen import _simple_page, max_concurrency, serve_hosts

PAGES = [f"/p{i}" for i in range(6)]


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


def test_a_host_waiting_for_its_slot_gets_it_at_once(settings, redis_url, worker_logs):  # type: ignore[no-untyped-def]
    """One host, no rate limit, concurrency 1, and a hook that takes 1 s a page: the host's
    next request waits for the slot, so each page gives it back as soon as its response is
    read, not after its hook. Its six pages are requested while the first of them is still
    in its hook (held through the hook: one a second, 5 s or more from first to last), and
    still never two at once at the server."""
    site = {"/": page(*PAGES), **{p: page() for p in PAGES}}
    env = {"PYTHONPATH": str(HOOKS)}
    with (
        serve_hosts(None, ["127.0.0.152"], extra_routes=site) as (server,),
        local_workers(redis_url, redis_url, fetch_threads=8, fetchers=1, log_dir=str(worker_logs),
                      extra_env=env),
    ):  # fmt: skip
        crawl = start_crawl(
            [server.base_url + "/"], settings=settings, allow_private_networks=True,
            obey_robots=False, rate=math.inf, concurrency=1, extract="extract_hooks:slow",
            extract_timeout=10,
        )  # fmt: skip
        crawl.wait(timeout=60)
        log = server.requests()
    assert crawl.progress()["done"] == 1 + len(PAGES)
    sent = sorted(e.time for e in log if e.path in PAGES)
    assert len(sent) == len(PAGES)
    assert sent[-1] - sent[0] < 3.0, [round(t - sent[0], 2) for t in sent]
    assert max_concurrency(log) == 1
