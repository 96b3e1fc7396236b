"""Admission: which of a page's links (and which redirect targets) enter a crawl.

A link is admitted when it is within the crawl's depth, scope and per-host budget and the
crawl's Bloom filter has not seen it; admit.lua then queues and counts it atomically (see
:mod:`frontier`). Every link turned away is counted under a ``skipped:<reason>`` counter, so
``discovered = admitted + deduplicated + skipped:*`` holds for every crawl.

A link robots.txt disallows, when the caller already holds its origin's rules, is marked seen
and counted (``robots_disallowed``, ``skipped:robots_disallowed``) in the same admit.lua call
and goes no further: no queue entry, no release, no fetch task. Links of origins whose rules
are not known here are admitted, and their fetch task asks robots.txt.

Redirect targets are admitted differently: the fetcher follows them at once, so a target is
only marked seen (no link fetches it a second time) and *claimed* by the URL that redirected
to it, so a retry of that URL follows its own targets again instead of stopping at its own
marks (:class:`RedirectClaims`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import redis

from ..web.robots import Robots
from ..web.scope import Scope
from ..web.urls import domain_counts, origin_of
from . import formats
from .bloom import BloomFilter
from .formats import Counter
from .frontier import Frontier
from .keys import CrawlKeys
from .options import CrawlOptions
from .scripts import Carried

if TYPE_CHECKING:
    from .robots_cache import RobotsCache

#: What robots.txt refuses as far as a process knows (:meth:`Admission.links`): its robots.txt
#: cache, asked only for the rules it holds (never a round trip), and the crawl's agent.
KnownRobots = tuple["RobotsCache", str]


class Admission:
    def __init__(
        self,
        client: redis.Redis,
        ck: CrawlKeys,
        opts: CrawlOptions,
        frontier: Frontier,
        bloom: BloomFilter,
    ) -> None:
        self.client = client
        self.ck = ck
        self.opts = opts
        self.frontier = frontier
        self.bloom = bloom
        self.scope: Scope = opts.scope

    def links(
        self,
        links: list[str],
        depth: int,
        robots: KnownRobots | None = None,
        later: Carried | None = None,
    ) -> dict[str, int]:
        """Admit a page's outlinks at ``depth``; returns skip counters by name.
        ``robots``: the rules this process holds, which refuse some links (None: a crawl
        that does not obey robots.txt). ``later``: the
        admit.lua calls that can wait go there (Frontier.admit), for the caller to send."""
        skipped: dict[str, int] = {}
        if self.opts.max_depth is not None and depth > self.opts.max_depth:
            if links:
                skipped[formats.skipped("max_depth")] = len(links)
            return _as_discovered(skipped)
        links, known = self._drop_known(links)
        keep = self._in_scope(links, depth, skipped)
        # Refused links are counted by admit.lua: once per URL, however many pages link it.
        keep, refused = _split_disallowed(keep, robots)
        if keep and self.opts.max_pages_per_host:
            if refused:
                self.frontier.admit([], known=known, refused=refused)
                known = 0
            over = self._admit_per_host(keep)
            if over:
                skipped[formats.skipped("max_pages_per_host")] = over
        elif keep or refused:  # one admit.lua call per partition for both
            self.frontier.admit(keep, known=known, refused=refused, later=later)
            known = 0
        if known:
            self._count_duplicates(known)
        return _as_discovered(skipped)

    def _in_scope(
        self, links: list[str], depth: int, skipped: dict[str, int]
    ) -> list[tuple[str, int]]:
        """(url, depth) of the links the crawl's scope keeps; the others counted in ``skipped``
        by reason."""
        keep = []
        for url in links:
            reason = self.scope.check(url)
            if reason is None:
                keep.append((url, depth))
            else:
                name = formats.skipped(reason)
                skipped[name] = skipped.get(name, 0) + 1
        return keep

    def _count_duplicates(self, n: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(self.ck.stats, Counter.DISCOVERED.value, n)
        pipe.hincrby(self.ck.stats, Counter.DEDUPLICATED.value, n)
        pipe.execute()

    def _drop_known(self, links: list[str]) -> tuple[list[str], int]:
        """Links this process already saw admitted or rejected as duplicates (mostly repeated
        navigation) are duplicates again: skip scoping and Redis for them; returns the rest
        and how many, to count with the page's admit.lua call. A known URL passed the scope
        check before, so skip counters stay as they would be."""
        known = self.frontier.known
        if known is None or not links:
            return links, 0
        return known.drop_known(links)

    def _admit_per_host(self, links: list[tuple[str, int]]) -> int:
        """Admit ``links`` within each domain's ``max_pages_per_host``; returns how many were
        turned away. A domain's budget is reserved (HINCRBY) before admit.lua runs and what
        turned out to be duplicates is given back, so racing pages never push a domain past
        its cap (at worst one turns away a link another then gives room for). Seeds count: a
        domain's counter starts at its number of seeds."""
        by_domain: dict[str, list[tuple[str, int]]] = {}
        for link in links:
            by_domain.setdefault(self.frontier.domain_of(link[0]), []).append(link)
        seeds = domain_counts(self.opts.seeds, self.opts.domain_key)
        return sum(
            self._admit_domain(d, pending, seeds.get(d, 0)) for d, pending in by_domain.items()
        )

    def _admit_domain(self, domain: str, pending: list[tuple[str, int]], seeds: int) -> int:
        cap, key = self.opts.max_pages_per_host, self.ck.for_domain(domain).host_pages
        while pending:
            pipe = self.client.pipeline()  # MULTI: the counter starts at the seeds once
            pipe.hsetnx(key, domain, seeds)
            pipe.hget(key, domain)
            room = cap - int(pipe.execute()[1])
            if room <= 0:
                break
            if len(pending) > room:  # keep seen links from eating the room, round by round
                pending = self._unseen(pending)
            want = min(len(pending), room)
            take = want - max(0, int(self.client.hincrby(key, domain, want)) - cap)
            admitted = self.frontier.admit(pending[:take]).admitted if take > 0 else 0
            if admitted < want:
                self.client.hincrby(key, domain, admitted - want)
            if take <= 0:
                break
            pending = pending[take:]
        return len(pending)

    def _unseen(self, links: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """``links`` minus those already in the crawl's Bloom filter (read-only; counted as
        admit.lua counts duplicates)."""
        present = self.bloom.contains_many([url for url, _ in links])
        fresh = [link for link, known in zip(links, present, strict=True) if not known]
        if len(fresh) < len(links):
            self._count_duplicates(len(links) - len(fresh))
        return fresh

    def redirect(self, target: str) -> str | None:
        """Why a redirect hop to ``target`` is not followed, or None to follow it."""
        if self.scope.check(target) is not None:
            return "out_of_scope"
        # Marking the target seen keeps it from being fetched a second time from a link.
        return None if self.bloom.add_many([target])[0] else "duplicate"

    def claims(self, url: str) -> RedirectClaims:
        return RedirectClaims(self, url)


class RedirectClaims:
    """The ``follow`` callback of one fetch of ``url``: vets each redirect hop.

    A target new to the crawl is marked seen and claimed for ``url`` in the crawl's redirects
    hash; a target ``url`` claimed in an earlier attempt is followed again. Claims are dropped
    when the URL ends well (:meth:`release`).
    """

    def __init__(self, admission: Admission, url: str) -> None:
        self.admission, self.url = admission, url
        self.client, self.key = admission.client, admission.ck.for_url(url).redirects
        self.claimed: list[str] | None = None  # read on the first hop only

    def follow(self, target: str) -> str | None:
        if self.claimed is None:
            raw = self.client.hget(self.key, self.url)
            self.claimed = json.loads(raw) if raw else []
        if target in self.claimed:
            return None
        reason = self.admission.redirect(target)
        if reason is None:
            self.claimed.append(target)
            self.client.hset(self.key, self.url, json.dumps(self.claimed))
        return reason

    @staticmethod
    def release(client: redis.Redis, ck: CrawlKeys, url: str) -> None:
        """``url`` ended well: its claims are no longer needed (a failed URL keeps them for
        retry-failed). Not atomic with finish: a leftover entry only costs its bytes."""
        client.hdel(ck.for_url(url).redirects, url)


def _split_disallowed(
    links: list[tuple[str, int]], robots: KnownRobots | None
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(allowed, refused by robots.txt) of ``links``, each in order, as far as ``robots``
    already holds their origins' rules. An unreadable robots.txt (disallow-all until it is
    read again) decides nothing here: its links' fetch tasks ask again."""
    if robots is None:
        return links, []
    cache, agent = robots
    rules: dict[str, Robots | None] = {}  # each origin looked up once a page
    allowed: list[tuple[str, int]] = []
    refused: list[tuple[str, int]] = []
    for link in links:
        origin = origin_of(link[0])
        if origin not in rules:
            rules[origin] = cache.known(origin)
        known = rules[origin]
        no = known is not None and known.kind == "parsed" and not known.allowed(agent, link[0])
        (refused if no else allowed).append(link)
    return allowed, refused


def _as_discovered(skipped: dict[str, int]) -> dict[str, int]:
    """``skipped`` with the links it turned away counted as discovered too: they were found
    in the page, and admit.lua counts only the links it sees (admitted, duplicates, robots'
    refusals). Both ride on the page's final counters, so a page finished twice after a
    fault counts them once, as its other counters."""
    if skipped:
        skipped[Counter.DISCOVERED.value] = sum(skipped.values())
    return skipped
