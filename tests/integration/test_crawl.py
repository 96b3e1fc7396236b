"""End to end: real redis-server, real worker processes, real HTTP sites on loopback."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks import start_crawl
from crawler_tasks.web.urls import normalize
from tests.support.exact import assert_exact_pages, reachable_urls
from tests.support.sitegen import has_skipped_extension, running_sites

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow

FAST = {"rate": math.inf, "concurrency": 4}


def crawled(crawl) -> Counter[str]:  # type: ignore[no-untyped-def]
    return Counter(r["url"] for r in crawl.pages(latest=False))


expected = reachable_urls


def start(settings, servers, **options):  # type: ignore[no-untyped-def]
    seeds = [s.base_url + "/" for s in servers]
    hosts = [s.base_url.split("//")[1].split(":")[0] for s in servers]
    rates = {h: math.inf for h in hosts}
    opts = {
        "allow_private_networks": True,
        "allowed_domains": hosts,
        "rate": math.inf,
        "concurrency": 4,
        **options,
    }
    return seeds, start_crawl(seeds, settings=settings, rates=rates, **opts)


def test_crawl_reaches_exactly_the_reachable_set(settings, celery_worker):
    with running_sites(["127.0.0.2", "127.0.0.3"], pages_per_host=120, links_per_page=6) as (
        graph,
        servers,
    ):
        seeds, crawl = start(settings, servers)
        summary = crawl.wait(timeout=180)
    got = assert_exact_pages(crawl, expected(graph, seeds), summary)
    assert summary["status_codes"]["404"] >= 1
    summary_file = json.loads((crawl.output_dir / "summary.json").read_text())
    assert summary_file["counters"]["done"] == len(got)
    # WARC: one request record per response, concurrent to it, with the request line sent.
    records: dict[str, dict[str, Any]] = {}
    for path in crawl.output_dir.glob("*.warc.gz"):
        with open(path, "rb") as f:
            for r in ArchiveIterator(f):
                if r.rec_type == "response":
                    records.setdefault(r.rec_headers.get_header("WARC-Record-ID"), {})["resp"] = (
                        r.rec_headers.get_header("WARC-Target-URI")
                    )
                elif r.rec_type == "request":
                    to = r.rec_headers.get_header("WARC-Concurrent-To")
                    records.setdefault(to, {})["req"] = (
                        r.rec_headers.get_header("WARC-Target-URI"),
                        r.http_headers.protocol,
                        r.http_headers.get_header("User-Agent"),
                    )
    assert len(records) == summary["counters"]["fetched"]
    for pair in records.values():
        uri, request_line, agent = pair["req"]
        assert uri == pair["resp"]
        assert request_line == "GET" and agent.startswith("crawler-tasks/")
    # Edges: exactly the links of every fetched HTML page, as the site has them (but files
    # with a non-HTML extension, which the crawler does not take for pages).
    edges = {
        tuple(line.split("\t"))
        for path in crawl.output_dir.glob("edges-*.tsv")
        for line in path.read_text().splitlines()
    }
    html_pages = {u for u in got if u in graph.pages and graph.pages[u].is_html}
    assert {src for src, _ in edges} <= html_pages
    for url in html_pages:
        links = {
            normalize(link) for link in graph.pages[url].links if not has_skipped_extension(link)
        }
        assert {dst for src, dst in edges if src == url} == links, url
    page = next(r for r in crawl.pages() if r["url"] == seeds[0])
    assert page["title"] == "Page /" and page["status"] == 200 and page["outlinks"]


def test_max_depth_and_max_pages_bound_the_crawl(settings, celery_worker):
    with running_sites(["127.0.0.2"], pages_per_host=200, links_per_page=5) as (graph, servers):
        seeds, by_depth = start(settings, servers, max_depth=2)
        _, by_pages = start(settings, servers, max_pages=25)
        depth_summary = by_depth.wait(timeout=120)
        by_pages.wait(timeout=120)
    assert_exact_pages(by_depth, expected(graph, seeds, max_depth=2), depth_summary)
    assert sum(crawled(by_pages).values()) == 25


def test_two_crawls_at_once_do_not_interfere(settings, celery_worker):
    with (
        running_sites(["127.0.0.4"], 80, 5, seed=1) as (g1, s1),
        running_sites(["127.0.0.5"], 60, 5, seed=2) as (g2, s2),
    ):
        seeds1, c1 = start(settings, s1)
        seeds2, c2 = start(settings, s2)
        summary1 = c1.wait(timeout=120)
        summary2 = c2.wait(timeout=120)
    assert_exact_pages(c1, expected(g1, seeds1), summary1)
    assert_exact_pages(c2, expected(g2, seeds2), summary2)
    assert c1.output_dir != c2.output_dir
