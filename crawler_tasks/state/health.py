"""How full Redis is, read without writing (a full Redis refuses every write, so the crawl
cannot record that it is stuck: readers ask Redis itself).

Two lines, both against ``maxmemory`` with ``noeviction`` (the only policy that never drops
crawl state): Redis *refuses writes* above ``maxmemory``; workers *pause admission* (new URLs)
above ``admission_memory_fraction`` of it (settings), a little earlier, so the rest of a crawl
(starting, finishing and recording URLs, the broker if it is the same Redis) keeps working.
On a Redis Cluster each master has its own limit: the fullest master speaks for all.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .connection import node_clients


@dataclass(frozen=True)
class Memory:
    """Redis's memory against its ``maxmemory`` (``noeviction``), in bytes."""

    used: int
    maxmemory: int

    def refuses_writes(self) -> bool:
        return self.used > self.maxmemory

    def over(self, fraction: float) -> bool:
        """At or above ``fraction`` of ``maxmemory``: no room to admit new URLs."""
        return self.refuses_writes() or self.used >= fraction * self.maxmemory

    def describe(self) -> str:
        return f"used {_mb(self.used)} of maxmemory {_mb(self.maxmemory)}"

    def as_dict(self) -> dict[str, int]:
        return {"used_bytes": self.used, "maxmemory_bytes": self.maxmemory}


def admission_paused(memory: Memory) -> str:
    """The state a person sees while workers hold new URLs back (log, ``crawler status``)."""
    return f"admission paused: Redis out of memory ({memory.describe()})"


def memory(client: redis.Redis) -> Memory | None:
    """Redis's memory (a cluster's fullest master), or None when no node has a limit that
    stops writes (no ``maxmemory``, an evicting policy) or says (INFO forbidden)."""
    nodes = [m for m in (_node_memory(node) for node in node_clients(client)) if m is not None]
    return max(nodes, key=lambda m: m.used / m.maxmemory, default=None)


def _node_memory(client: redis.Redis) -> Memory | None:
    try:
        info = client.info("memory")
    except redis.ResponseError:  # INFO renamed or forbidden (managed Redis): cannot tell
        return None
    limit = int(info.get("maxmemory", 0) or 0)
    if not limit or info.get("maxmemory_policy") != "noeviction":
        return None
    # Redis's own test: used memory minus replication and AOF buffers, against the limit.
    used = int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0))
    return Memory(used, limit)


def refuses_writes(client: redis.Redis) -> bool:
    """True while Redis is over ``maxmemory`` with ``noeviction``: it answers reads and refuses
    writes with OOM errors, and every crawl on it pauses until memory is freed or raised. On a
    Redis Cluster: while any master is."""
    m = memory(client)
    return m is not None and m.refuses_writes()


def no_room_for(client: redis.Redis, need: int) -> bool:
    """True if Redis refuses writes, or would once a new crawl's dedupe filter (``need`` bytes,
    allocated by its first admit) is in: a Lua script that starts under ``maxmemory`` may end
    far above it, so check before."""
    if refuses_writes(client):
        return True
    for node in node_clients(client):  # the crawl's slot may be on any master
        try:
            info = node.info("memory")
        except redis.ResponseError:  # INFO forbidden (managed Redis): let the writes tell
            return False
        limit = int(info.get("maxmemory", 0) or 0)
        if limit and int(info.get("used_memory", 0)) + need > limit:
            return True
    return False


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n < 2**30 else f"{n / 2**30:.1f} GB"
