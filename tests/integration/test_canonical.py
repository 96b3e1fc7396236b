"""Canonical links and near-duplicate pages, driven in-process (tests/support/driver.py)."""

from __future__ import annotations

import math
import random

import pytest

from crawler_tasks import start_crawl
from tests.support.key_table import undescribed
from tests.support.sitegen import serve_hosts
from tests.unit.test_canonical import text


def html(text: str, hrefs: tuple[str, ...] = (), canonical: str | None = None):  # type: ignore[no-untyped-def]
    head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    links = "".join(f'<a href="{h}">{h}</a> ' for h in hrefs)
    body = f"<html><head><title>t</title>{head}</head><body><p>{text}</p>{links}</body></html>"
    return lambda h: h.send_body(200, body.encode(), "text/html")


def crawl_of(settings, server, **options):  # type: ignore[no-untyped-def]
    opts = {"allow_private_networks": True, "obey_robots": False, "rate": math.inf}
    return start_crawl([server.base_url + "/"], settings=settings, **{**opts, **options})


CANONICAL_SITE = {
    "/": html("home", ("/p?utm=1",)),
    "/p": html("product", ("/q",), canonical="/p"),
    "/q": html("next"),
    "/only-from-alias": html("alias link"),
}


@pytest.mark.parametrize("follow", [True, False])
def test_canonical_is_followed_instead_of_the_alias(settings, driver, follow):  # type: ignore[no-untyped-def]
    site = dict(CANONICAL_SITE)
    site["/p?utm=1"] = html("product", ("/only-from-alias",), canonical="/p")
    with serve_hosts(None, ["127.0.0.170"], extra_routes={}) as (server,):
        server.extra_routes = {
            "/": site["/"],
            "/p": lambda h: site["/p?utm=1" if "utm" in h.path else "/p"](h),
            "/q": site["/q"],
            "/only-from-alias": site["/only-from-alias"],
        }
        crawl = crawl_of(settings, server, canonical=follow)
        driver.run(crawl)
        paths = sorted(r.path for r in server.requests())
    base = server.base_url
    alias = next(r for r in crawl.pages() if "utm" in r["url"])
    assert alias["canonical"] == base + "/p"
    if follow:
        assert paths == ["/", "/p", "/p?utm=1", "/q"]
        assert alias["canonical_followed"] is True and alias["outlinks"] == [base + "/p"]
    else:
        assert paths == ["/", "/only-from-alias", "/p?utm=1"]
        assert "canonical_followed" not in alias


def test_near_duplicates_are_marked_and_their_links_skipped(settings, driver, client):  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    original = text(rng)
    near = list(original)
    near[200] = "changed"  # one word of 1000
    other = text(rng)
    routes = {
        "/": html("home", ("/a", "/b", "/c")),
        "/a": html(" ".join(original)),
        "/b": html(" ".join(near), ("/from-duplicate",)),
        "/c": html(" ".join(other), ("/from-other",)),
        "/from-other": html("leaf"),
        "/from-duplicate": html("leaf"),
    }
    with serve_hosts(None, ["127.0.0.171"], extra_routes=routes) as (server,):
        crawl = crawl_of(settings, server, skip_near_duplicates=True, concurrency=1)
        summary = driver.run(crawl)
        paths = sorted(r.path for r in server.requests())
    pages = {r["url"].rsplit("/", 1)[1]: r for r in crawl.pages()}
    assert pages["b"]["duplicate_of"] == server.base_url + "/a"
    assert pages["a"]["duplicate_of"] is None and pages["c"]["duplicate_of"] is None
    assert pages["b"]["outlinks"] == []
    assert paths == ["/", "/a", "/b", "/c", "/from-other"]
    assert summary["counters"]["near_duplicates"] == 1
    assert undescribed(client) == []
