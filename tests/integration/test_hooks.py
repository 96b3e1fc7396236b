"""Users' extraction hooks and on_item tasks, driven in-process (tests/support/driver.py): real
Redis, real HTTP servers, the real dispatcher and pipeline. What needs Celery itself (the on_item
task in a user's worker, SIGKILL and redelivery) is in test_hooks_workers.py."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.errors import ConfigError
from tests.support.driver import Driver
from tests.support.paths import HOOKS
from tests.support.sitegen import _simple_page, serve_hosts


@pytest.fixture
def driver(settings, monkeypatch) -> Iterator[Driver]:  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(HOOKS))
    d = Driver(settings)
    yield d
    d.close()


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


SITE = {
    "/": page("/a", "/b", "/bad", "/slow"),
    "/a": page("/", "/b"),
    "/b": page("/a"),
    "/bad": page("/a"),
    "/slow": page("/b"),
}


def crawl_site(settings, server, **options):  # type: ignore[no-untyped-def]
    opts = {"allow_private_networks": True, "obey_robots": False, "rate": math.inf}
    return start_crawl([server.base_url + "/"], settings=settings, **{**opts, **options})


def test_items_once_per_page_with_the_tree_and_counted(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.141"], extra_routes=SITE) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:two_items")
        summary = driver.run(crawl)
    pages = {r["url"]: r for r in crawl.pages()}
    lines = list(crawl.items())
    assert len(pages) == 5
    assert Counter(line["url"] for line in lines) == dict.fromkeys(pages, 2)
    for line in lines:
        assert line["rid"] == pages[line["url"]]["rid"]
    titles = {line["url"]: line["item"]["title"] for line in lines if "title" in line["item"]}
    # The title is in <head>: the hook got the whole tree, and the page's own links.
    assert titles[server.base_url + "/a"] == "/a"
    firsts = [line["item"] for line in lines if "title" in line["item"]]
    assert all(item["html"] for item in firsts)
    assert {item["links"] for item in firsts if item["title"] == "/"} == {4}
    assert all(r["items"] == 2 and "_items" not in r for r in pages.values())
    assert summary["counters"]["items"] == 10 == crawl.progress()["items"]
    assert "extract_errors" not in summary["counters"]


def test_raising_and_sleeping_hooks_are_recorded_errors(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.142"], extra_routes=SITE) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:moody", extract_timeout=0.5)
        summary = driver.run(crawl)
    pages = {r["url"].rsplit("/", 1)[1]: r for r in crawl.pages()}
    assert set(pages) == {"", "a", "b", "bad", "slow"}
    assert pages["bad"]["extract_error"] == "ValueError: no price on this page"
    assert pages["slow"]["extract_error"] == "timeout"
    assert pages["bad"]["error"] is None and pages["bad"]["status"] == 200
    assert pages["a"].get("extract_error") is None and pages["a"]["items"] == 1
    # The crawler's own links are still followed from a failed hook's page.
    assert pages["slow"]["outlinks"] == [server.base_url + "/b"]
    dead = {d["url"].rsplit("/", 1)[1]: d for d in crawl.failed()}
    assert set(dead) == {"bad", "slow"}
    assert dead["slow"]["extract_error"] == "timeout"
    c = summary["counters"]
    assert (c["extract_errors"], c["items"], c.get("failed", 0)) == (2, 3, 0)
    assert {line["url"].rsplit("/", 1)[1] for line in crawl.items()} == {"", "a", "b"}


def test_retry_failed_replays_extract_errors_with_sound_counters(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.143"], extra_routes=SITE) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:moody", extract_timeout=0.5)
        driver.run(crawl)
        assert crawl.retry_failed() == 2
        summary = driver.run(crawl)
    c = summary["counters"]
    assert (c["done"], c["extract_errors"], c.get("failed", 0)) == (5, 2, 0)


def test_links_added_are_crawled_and_dropped_are_not(settings, driver):  # type: ignore[no-untyped-def]
    routes = {
        "/": page("/skip/1", "/a"),
        "/a": page("/skip/2"),
        "/hidden": page(),
        "/also-hidden": page(),
        "/skip": page(),
    }
    with serve_hosts(None, ["127.0.0.144"], extra_routes=routes) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:steer", max_depth=1)
        driver.run(crawl)
        requested = sorted(r.path for r in server.requests())
    assert requested == ["/", "/a", "/also-hidden", "/hidden"]
    root = next(r for r in crawl.pages() if r["url"].endswith(":" + str(server.port) + "/"))
    base = server.base_url
    assert root["outlinks"] == [base + "/a", base + "/hidden", base + "/also-hidden"]


def test_on_item_gets_every_item_and_a_failed_send_is_an_error(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.145"], extra_routes=SITE) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:two_items", on_item="app.store")
        driver.run(crawl)
        sent = [item for (_t, _c, _u, _d, items) in driver.items_sent for item in items]
        assert {t for t, *_ in driver.items_sent} == {"app.store"}
        assert sorted(map(json.dumps, sent)) == sorted(json.dumps(x["item"]) for x in crawl.items())
        assert len(sent) == 10

        driver.fail_items = ConnectionError("broker said no")
        again = crawl_site(settings, server, extract="extract_hooks:two_items", on_item="x.y")
        summary = driver.run(again)
    assert summary["counters"]["extract_errors"] == 5
    assert {r["extract_error"] for r in again.pages()} == {
        "on_item: ConnectionError: broker said no"
    }
    assert len(list(again.items())) == 10  # the items are on disk all the same


def test_a_hook_returning_no_json_is_an_error(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.146"], extra_routes={"/": page()}) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:not_json")
        driver.run(crawl)
    (record,) = crawl.pages()
    assert record["extract_error"].startswith("TypeError: Object of type object")


def test_a_hook_that_cannot_be_imported_is_an_error(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.147"], extra_routes={"/": page()}) as (server,):
        crawl = crawl_site(settings, server, extract="no_such_module:f")
        summary = driver.run(crawl)
    (record,) = crawl.pages()
    why = "cannot import the hook no_such_module:f: ModuleNotFoundError: No module named"
    assert record["extract_error"].startswith(why)
    # The crawl stops once, clearly: cancelled, with the reason in its status and summary.
    assert summary["status"] == "cancelled" and summary["error"].startswith(why)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"extract": "module.without.function"}, "extract must be"),
        ({"extract": "a:b:c"}, "extract must be"),
        ({"extract_timeout": 0}, "extract_timeout"),
        ({"on_item": ""}, "on_item"),
    ],
)
def test_hook_options_are_checked(settings, options, message):  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        start_crawl(
            ["http://127.0.0.148/"], settings=settings, allow_private_networks=True, **options
        )


def _html(body: str):  # type: ignore[no-untyped-def]
    doc = f"<!DOCTYPE html><html><head><title>t</title></head><body>{body}</body></html>"
    return lambda h: h.send_body(200, doc.encode(), "text/html")


SCRAPY_SITE = {
    "/": _html(
        '<h1>Home</h1><span class="tag">a</span><span class="tag">b</span>'
        '<button data-href="/only-by-script">more</button>'
        '<a class="next" rel="nofollow" href="/page/2">next</a>'
    ),
    "/only-by-script": _html("<h1>Script</h1>"),
    "/page/2": _html("<h1>Two</h1>"),
}


def test_a_hook_written_as_a_scrapy_callback_works_unchanged(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.142"], extra_routes=SCRAPY_SITE) as (server,):
        crawl = crawl_site(settings, server, extract="extract_hooks:scrapy_style")
        driver.run(crawl)
    base = server.base_url
    items = {line["url"]: line["item"] for line in crawl.items()}
    # /only-by-script is in no <a>, /page/2 is nofollow: the hook's follow() reached both.
    assert set(items) == {base + "/", base + "/only-by-script", base + "/page/2"}
    home = items[base + "/"]
    assert home["title"] == "Home" and home["tags"] == ["a", "b"]
    assert home["hrefs"] == ["/page/2"] and home["anchors"] == 1
    assert home["text"] == "Homeabmorenext" and home["joined"] == base + "/x/y"
    assert home["iterlinks"] == ["/page/2"]
    assert items[base + "/page/2"]["title"] == "Two"
