"""Adaptive schedules (issue 35), the pure rules: a learnt interval's bounds and when a sitemap's
lastmod decides. The runs themselves: tests/integration/test_adaptive.py."""

from __future__ import annotations

import pytest

from crawler_tasks.errors import ConfigError
from crawler_tasks.state.options import CrawlOptions
from crawler_tasks.web.change_rate import lastmod_agrees, lastmod_trusted
from crawler_tasks.web.sitemaps import w3c_time


def test_interval_bounds_are_checked() -> None:
    with pytest.raises(ConfigError, match="min_interval"):
        CrawlOptions.from_user(None, seeds=("http://a.example/",), min_interval=0)
    with pytest.raises(ConfigError, match="max_interval"):
        CrawlOptions.from_user(None, seeds=("http://a.example/",), min_interval=10, max_interval=5)


def test_lastmod_rules() -> None:
    assert lastmod_agrees(lastmod=10.0, previous_visit=5.0, changed=True)
    assert lastmod_agrees(lastmod=4.0, previous_visit=5.0, changed=False)
    assert not lastmod_agrees(lastmod=4.0, previous_visit=5.0, changed=True)
    assert not lastmod_trusted(checks=19, agreed=19)
    assert lastmod_trusted(checks=20, agreed=19) and not lastmod_trusted(checks=20, agreed=18)
    assert w3c_time("2024-05-01") == 1714521600.0
    assert w3c_time("2024-05-01T02:00:00+02:00") == 1714521600.0 == w3c_time("2024-05-01T00:00Z")
    assert w3c_time("2024-05") is None and w3c_time("yesterday") is None
