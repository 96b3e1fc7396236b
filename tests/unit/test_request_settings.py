"""A crawl's proxy must pass the address guard itself. The request settings on the wire:
tests/integration/test_request_settings.py."""

from __future__ import annotations

import pytest

from crawler_tasks.errors import BlockedAddress
from crawler_tasks.web.fetcher import Fetcher


def test_the_proxy_itself_must_pass_the_address_guard() -> None:
    fetcher = Fetcher(
        user_agent="t", connect_timeout=1, read_timeout=1, total_timeout=2,
        max_body_bytes=1000, max_redirects=1,
    )  # fmt: skip
    with pytest.raises(BlockedAddress):
        fetcher.get("http://93.184.216.34/", proxy="http://u:p@127.0.0.1:3128")
    with pytest.raises(BlockedAddress):
        fetcher.get("http://93.184.216.34/", proxy="http://169.254.169.254:80", allow_private=True)
