"""Self-tests for the synthetic-site test infrastructure in ``sitegen``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urldefrag, urljoin

import pytest
import requests

from tests.support.sitegen import (
    Graph,
    Page,
    Request,
    SiteServer,
    generate,
    hostile_routes,
    max_concurrency,
    rate_report,
    reachable,
    running_sites,
    serve_hosts,
)

A = "http://127.0.0.2:8001"
B = "http://127.0.0.3:8002"


def tiny_graph() -> Graph:
    pages = [
        Page(f"{A}/", links=[f"{A}/a", f"{A}/a#frag", f"{A}/doc.pdf", f"{A}/data/1", f"{B}/"]),
        Page(f"{A}/a", links=[f"{A}/", f"{A}/b", f"{A}/missing"]),  # cycle back to the root
        Page(f"{A}/b", links=[f"{A}/c"]),
        Page(f"{A}/c"),
        Page(f"{A}/missing", status=404),
        Page(f"{A}/doc.pdf", content_type="application/pdf", body=b"%PDF"),
        # Extension-less non-HTML: fetched, but its "links" must not be followed.
        Page(f"{A}/data/1", content_type="application/json", links=[f"{A}/never"], body=b"{}"),
        Page(f"{B}/", links=[f"{B}/x"]),
        Page(f"{B}/x"),
    ]
    return Graph(pages={p.url: p for p in pages}, hosts=[A, B])


def test_reachable_tiny_graph() -> None:
    graph = tiny_graph()
    assert reachable(graph, [f"{A}/"]) == {
        f"{A}/": 0,
        f"{A}/a": 1,
        f"{A}/data/1": 1,
        f"{B}/": 1,
        f"{A}/b": 2,
        f"{A}/missing": 2,
        f"{B}/x": 2,
        f"{A}/c": 3,
    }
    # Host filter accepts bare hostnames, host:port and base URLs alike.
    for allowed in ({"127.0.0.2"}, {"127.0.0.2:8001"}, {A}):
        assert set(reachable(graph, [f"{A}/"], allowed_hosts=allowed)) == {
            f"{A}/",
            f"{A}/a",
            f"{A}/data/1",
            f"{A}/b",
            f"{A}/missing",
            f"{A}/c",
        }
    assert reachable(graph, [f"{A}/#top"], max_depth=1) == {
        f"{A}/": 0,
        f"{A}/a": 1,
        f"{A}/data/1": 1,
        f"{B}/": 1,
    }


def test_generate_is_deterministic_and_fully_reachable() -> None:
    graph = generate([A, B], pages_per_host=300, links_per_page=6, seed=7, nav_links=3)
    again = generate([A, B], pages_per_host=300, links_per_page=6, seed=7, nav_links=3)
    assert {u: p.hrefs for u, p in graph.pages.items()} == {
        u: p.hrefs for u, p in again.pages.items()
    }
    assert generate([A], 300, 6, seed=8).pages[f"{A}/"].hrefs != graph.pages[f"{A}/"].hrefs

    # The raw hrefs resolve (fragment dropped) to exactly the recorded links.
    for page in graph.pages.values():
        assert len(page.hrefs) == len(page.links)
        for href, link in zip(page.hrefs, page.links, strict=True):
            assert urldefrag(urljoin(page.url, href))[0] == link

    hrefs = [h for p in graph.pages.values() for h in p.hrefs]
    assert any(h.startswith("http://") for h in hrefs)
    assert any(h.startswith("//") for h in hrefs)
    assert any(h.startswith("/") and not h.startswith("//") for h in hrefs)
    assert any(not h.startswith(("/", "http:", "#")) for h in hrefs)  # relative
    assert any("#" in h for h in hrefs)
    assert any(len(set(p.links)) < len(p.links) for p in graph.pages.values())  # duplicates
    assert all(
        p.links[:3] == [f"{A}/", f"{A}/d0/p1", f"{A}/d0/p2"]
        for u, p in graph.pages.items()
        if u.startswith(A) and p.is_html
    )

    # From one root, every generated URL is reached except skip-listed extensions.
    expected = reachable(graph, [f"{A}/"])
    for url in graph.pages:
        if re.search(r"\.(pdf|png)$", url):
            assert url not in expected
        else:
            assert url in expected, url
    kinds = {p.content_type for u, p in graph.pages.items() if u in expected}
    assert {"application/json", "application/octet-stream"} <= kinds
    assert any(graph.pages[u].status == 404 for u in expected)


def test_server_serves_logs_and_404s() -> None:
    robots = "User-agent: *\nDisallow: /private\n"
    with running_sites(["127.0.0.2", "127.0.0.3"], 20, 4, robots_txt={"127.0.0.2": robots}) as (
        graph,
        (one, two),
    ):
        session = requests.Session()
        r = session.get(one.base_url + "/d0/p5")
        assert r.status_code == 200
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        assert "<title>Page /d0/p5</title>" in r.text
        assert r.headers["Content-Length"] == str(len(r.content))

        assert session.get(one.base_url + "/robots.txt").text == robots
        assert session.get(two.base_url + "/robots.txt").status_code == 404
        assert session.get(one.base_url + "/nope").status_code == 404
        assert session.get(one.base_url + "/d0/p5?x=1").status_code == 404
        assert session.head(one.base_url + "/").status_code == 200
        assert session.get(two.base_url + "/d0/p5").status_code == 200  # its own copy
        missing = next(u for u, p in graph.pages.items() if p.status == 404)
        assert requests.get(missing).status_code == 404

        first = one.requests()[0]
        assert (first.path, first.address, first.method, first.status) == (
            "/d0/p5",
            "127.0.0.2",
            "GET",
            200,
        )
        assert first.host == one.netloc and first.end is not None and first.end >= first.time
        assert [e.path for e in two.requests()] == ["/robots.txt", "/d0/p5"]
        assert rate_report(one.log, one.netloc)["count"] == len(one.log) == 6


def test_server_without_graph_then_assigned() -> None:
    with SiteServer(address="127.0.0.4") as server:
        assert requests.get(server.base_url + "/").status_code == 404
        server.graph = generate([server.base_url], 3, 2)
        assert requests.get(server.base_url + "/").status_code == 200
    graph = generate([server.base_url], 3, 2)
    with serve_hosts(graph, ["127.0.0.4"]) as (again,):
        assert again.base_url == server.base_url  # port taken from the graph
        assert requests.get(again.base_url + "/d0/p2").status_code == 200


def synthetic_log(times: list[float], host: str = "h:1", duration: float = 0.1) -> list[Request]:
    return [
        Request(time=t, host=host, path="/", address=host.split(":")[0], end=t + duration)
        for t in times
    ]


def test_rate_report_and_concurrency() -> None:
    log = synthetic_log([0.0, 0.5, 0.9, 1.0, 3.0]) + synthetic_log([0.0, 0.01], host="other:2")
    report = rate_report(log, "h:1")
    assert report["count"] == 5
    assert report["max_in_window"] == 3  # [0.0, 1.0) holds 0.0, 0.5, 0.9
    assert report["min_interval"] == pytest.approx(0.1)
    assert report["duration"] == pytest.approx(3.0)
    assert rate_report(log, "h")["count"] == 5  # bare hostname matches too
    assert rate_report([], "h")["min_interval"] == float("inf")

    assert max_concurrency(log, "h:1") == 1
    assert max_concurrency(synthetic_log([0.0, 0.1, 0.15])) == 2  # 0.1 starts as 0.0 ends
    assert max_concurrency(log) == 3


@pytest.fixture(scope="module")
def hostile() -> Iterator[SiteServer]:
    with SiteServer(address="127.0.0.5", extra_routes=hostile_routes()) as server:
        yield server


def test_hostile_routes_quick(hostile: SiteServer) -> None:
    base, session = hostile.base_url, requests.Session()
    r = session.get(base + "/redirect-chain/3")
    assert (r.status_code, len(r.history)) == (200, 3)
    r = session.get(base + "/redirect-to-metadata", allow_redirects=False)
    assert r.headers["Location"].startswith("http://169.254.169.254/")
    assert [session.get(base + "/flaky?q=1").status_code for _ in range(3)] == [500, 500, 200]
    r = session.get(base + "/rate-limited")
    assert (r.status_code, r.headers["Retry-After"]) == (429, "3")
    assert session.get(base + "/rate-limited").status_code == 200
    assert "/calendar/2025/01" in session.get(base + "/calendar/2024/12").text
    r = session.get(base + "/slow-trickle?interval=0.01&duration=0.2")
    assert len(r.content) == 20
    with pytest.raises(requests.ConnectionError):
        session.get(base + "/reset")
    with pytest.raises(requests.TooManyRedirects):
        session.get(base + "/redirect-loop")
