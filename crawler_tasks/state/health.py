"""Whether Redis accepts writes, read without writing (a full Redis refuses every write, so the
crawl cannot record that it is stuck: readers ask Redis itself)."""

from __future__ import annotations

import redis

from .connection import node_clients

#: What a person sees while Redis is full (status line, ``crawler status``).
REFUSES_WRITES = "Redis refuses writes (maxmemory)"


def refuses_writes(client: redis.Redis) -> bool:
    """True while Redis is over ``maxmemory`` with ``noeviction``: it answers reads and refuses
    writes with OOM errors, and every crawl on it pauses until memory is freed or raised. On a
    Redis Cluster: while any master is."""
    return any(_over_maxmemory(node) for node in node_clients(client))


def _over_maxmemory(client: redis.Redis) -> bool:
    try:
        info = client.info("memory")
    except redis.ResponseError:  # INFO renamed or forbidden (managed Redis): cannot tell
        return False
    limit = int(info.get("maxmemory", 0) or 0)
    if not limit or info.get("maxmemory_policy") != "noeviction":
        return False
    # Redis's own test: used memory minus replication and AOF buffers, against the limit.
    used = int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0))
    return used > limit
