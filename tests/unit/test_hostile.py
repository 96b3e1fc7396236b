"""Hostile input, the parts with no crawl: a redirect to a blocked address literal never reaches
the follow step, and a body too large or undecodable is a final state. The crawls:
tests/integration/test_hostile.py and tests/integration/test_hostile_web.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crawler_tasks.errors import BadEncoding, BlockedAddress, TooLarge
from crawler_tasks.web.fetcher import Fetcher
from tests.support.sitegen import (
    SiteServer,
    hostile_routes,
)

MIB = 1 << 20


# --- fetcher details the pipeline relies on ------------------------------------------------------


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(
        user_agent="test",
        connect_timeout=1,
        read_timeout=2,
        total_timeout=3,
        max_body_bytes=MIB,
        max_redirects=5,
    )
    yield f
    f.close()


def test_redirect_to_blocked_literal_never_reaches_follow(fetcher: Fetcher) -> None:
    asked: list[str] = []

    def follow(target: str) -> str | None:
        asked.append(target)
        return None

    with SiteServer(address="127.0.0.45", extra_routes=hostile_routes()) as site:
        with pytest.raises(BlockedAddress) as info:
            fetcher.get(site.base_url + "/redirect-to-metadata", allow_private=True, follow=follow)
        # Loopback is no metadata: with allow_private it goes to follow (the crawl's scope).
        resp = fetcher.get(
            site.base_url + "/redirect-to-loopback",
            allow_private=True,
            follow=lambda t: asked.append(t) or "out_of_scope",
        )
    assert asked == ["http://127.0.0.1:1/"]
    assert resp.status == 302 and resp.stop_reason == "out_of_scope"
    details = info.value.details
    assert details["redirects"] == [(302, "http://169.254.169.254/latest/meta-data/")]
    assert details["final_url"] == site.base_url + "/redirect-to-metadata"


def test_too_large_and_bad_encoding_are_final(fetcher: Fetcher) -> None:
    routes = {
        "/bad-gzip": lambda h: h.send_body(
            200, b"\x1f\x8bnot gzip at all" * 10, "text/html", {"Content-Encoding": "gzip"}
        ),
    }
    with SiteServer(address="127.0.0.45", extra_routes={**hostile_routes(), **routes}) as site:
        with pytest.raises(TooLarge) as info:
            fetcher.get(site.base_url + "/big-declared", allow_private=True)
        with pytest.raises(BadEncoding):
            fetcher.get(site.base_url + "/bad-gzip", allow_private=True)
    assert info.value.details["status"] == 200
    assert info.value.details["content_type"] == "text/html"
