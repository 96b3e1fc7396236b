"""A crawl split into partitions (state/keys.py): the hosts spread over them. The crawl itself on
partitions: tests/integration/test_partitions.py."""

from __future__ import annotations

from crawler_tasks.state.keys import partition_of

HOSTS = ["127.0.0.81", "127.0.0.82", "127.0.0.83", "127.0.0.84"]


def test_the_hosts_spread_over_partitions():
    parts = {partition_of(f"{h}", 4) for h in HOSTS}
    assert len(parts) >= 2, parts  # else the tests below would not cross partitions
