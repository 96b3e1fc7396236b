"""The argument lists of the two hottest scripts, admit.lua and release.lua, built in one
place each: the scripts' headers name these classes, and a field added here is an argument
added there (tests/unit/test_formats.py checks release.lua's count). Their reply codes and the
values they store stay in formats.py."""

from __future__ import annotations

from dataclasses import dataclass

from .formats import Steering


# --- admit.lua's arguments ------------------------------------------------------------------
@dataclass(frozen=True)
class AdmitCall:
    """ARGV of admit.lua (see its header): ``keys`` then ``args`` for one batch."""

    max_pages: int  # -1: none, or checked by reserve.lua (several partitions)
    k: int
    queue_prefix: str
    dfs: bool
    shards: int
    force: bool
    shard_bits: int
    packed_hashes: bytes
    known: int
    cap: int = -1  # room granted by reserve.lua; -1: none
    tails: tuple[str | int | float, ...] = ()  # tails.tails_args: heads and spill buffers

    def args(self, items: list[tuple[str, str]]) -> list[str | int | float | bytes]:
        """``items``: (domain, entry) per URL, in the order of ``packed_hashes``."""
        out: list[str | int | float | bytes] = [
            self.max_pages,
            self.k,
            self.queue_prefix,
            1 if self.dfs else 0,
            self.shards,
            1 if self.force else 0,
            self.shard_bits,
            self.packed_hashes,
            self.known,
            self.cap,
            *self.tails,
        ]
        for domain, value in items:
            out.append(domain)
            out.append(value)
        return out


# --- release.lua's arguments ----------------------------------------------------------------
@dataclass(frozen=True)
class ReleaseCall:
    """ARGV of release.lua (see its header), in its order: one partition, one round."""

    limit: int  # domains looked at, at most
    queue_prefix: str
    lease_prefix: str
    domain_prefix: str
    lease_seconds: float
    rate: float  # the crawl's default rate, req/s (inf: none)
    burst: int
    concurrency: int  # per domain
    worker: str  # the releasing worker process (Inflight stage "r")
    budget: int | None  # entries released at most; None: no cap
    cluster_rates: str  # "domain<TAB>req/s" pairs of `crawler set-rate`, tab-joined
    owner_rates: str  # the crawl owner's rates, the same way
    steering: Steering
    holders: str = ""  # live fetch processes with a direct queue, tab-joined (workers.holder)
    address_interval: float = 0.0  # seconds between two requests to one address (0: none)
    address_concurrency: int = 0  # in flight per address (0: none)
    address_prefix: str = ""  # the partition's address keys (PartKeys.address_prefix)
    tails: tuple[str | int | float, ...] = ()  # tails.tails_args: heads and spill buffers
    dfs: bool = False

    def args(self) -> list[str | int | float]:
        return [
            self.limit,
            self.queue_prefix,
            self.lease_prefix,
            self.domain_prefix,
            self.lease_seconds,
            "inf" if self.rate == float("inf") else self.rate,
            self.burst,
            self.concurrency,
            self.worker,
            "inf" if self.budget is None else self.budget,
            self.cluster_rates,
            self.owner_rates,
            self.steering.value,
            self.holders,
            self.address_interval,
            self.address_concurrency,
            self.address_prefix,
            *self.tails,
            1 if self.dfs else 0,
        ]
