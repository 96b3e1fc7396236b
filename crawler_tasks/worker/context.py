"""What one worker process holds: its Redis client, HTTP session, robots cache, open output
files and a cache of crawl options. Built once per process (after the fork, for prefork
pools) by ``tasks.context()`` and passed to the pipeline functions; nothing here is global.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import redis

from ..settings import Settings
from ..state import events
from ..state.bloom import BloomFilter, known_urls
from ..state.frontier import Frontier
from ..state.keys import Keys
from ..state.ledger import CrawlState
from ..state.options import CrawlOptions
from ..state.politeness import Politeness
from ..state.robots_cache import RobotsCache
from ..state.scripts import Scripts
from ..state.validators import Seen, Validators, change, digest
from ..web.fetcher import Fetcher, Response
from ..web.urls import Scope, domain_counts
from .output import CrawlOutput, Outputs, write_summary

log = logging.getLogger(__name__)

Enqueue = Callable[..., None]


def redis_client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings.state_url, health_check_interval=30, socket_keepalive=True)


class Context:
    def __init__(self, settings: Settings, enqueue_parse: Enqueue, on_finished: Enqueue) -> None:
        self.settings = settings
        self.client = redis_client(settings)
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(self.client)
        self.fetcher = Fetcher.from_settings(settings)
        self.outputs = Outputs()
        self.enqueue_parse = enqueue_parse
        self._on_finished = on_finished
        self._options: OrderedDict[str, CrawlOptions] = OrderedDict()
        self._robots: dict[bool, RobotsCache] = {}
        self._scopes: dict[str, Scope] = {}

    def close(self) -> None:
        self.outputs.close()
        self.fetcher.close()
        self.client.close()

    # --- crawl lookups -----------------------------------------------------------------------
    def options(self, crawl_id: str) -> CrawlOptions | None:
        opts = self._options.get(crawl_id)
        if opts is None:
            raw = self.client.get(self.keys.crawl(crawl_id).config)
            if raw is None:
                return None
            opts = self._options[crawl_id] = CrawlOptions.from_json(raw)
            while len(self._options) > 256:
                self._options.popitem(last=False)
        return opts

    def state(self, crawl_id: str) -> CrawlState:
        return CrawlState(self.client, self.keys, crawl_id, self.scripts)

    def frontier(self, opts: CrawlOptions) -> Frontier:
        return Frontier(self.client, self.keys, opts, self.scripts, self.settings)

    def politeness(self, opts: CrawlOptions) -> Politeness:
        return Politeness(
            self.client, self.keys, self.keys.crawl(opts.crawl_id), self.scripts, self.settings
        )

    def scope(self, opts: CrawlOptions) -> Scope:
        scope = self._scopes.get(opts.crawl_id)
        if scope is None:
            scope = self._scopes[opts.crawl_id] = opts.scope
        return scope

    def robots(self, opts: CrawlOptions) -> RobotsCache:
        private = opts.allow_private_networks
        cache = self._robots.get(private)
        if cache is None:
            cache = self._robots[private] = RobotsCache(
                self.client,
                self.keys,
                ttl=self.settings.robots_ttl,
                error_ttl=self.settings.robots_error_ttl,
                http_get=lambda url: self._robots_get(url, private),
            )
        return cache

    def _robots_get(self, url: str, private: bool) -> tuple[int | None, str | None, bytes]:
        try:
            resp = self.fetcher.get(url, allow_private=private, follow=lambda _t: "manual")
        except Exception as exc:  # any failure to get robots.txt means "unreachable"
            log.info("robots.txt %s unreachable: %s", url, exc)
            return None, None, b""
        location = resp.redirects[-1][1] if resp.redirects else None
        return resp.status, location, resp.body

    # --- pipeline helpers --------------------------------------------------------------------
    def follow_redirect(self, opts: CrawlOptions, target: str) -> str | None:
        """Why a redirect hop to ``target`` is not followed, or None to follow it."""
        reason = self.scope(opts).check(target)
        if reason is not None:
            return "out_of_scope"
        bloom = BloomFilter(self.client, self.keys.crawl(opts.crawl_id), opts.bloom, self.scripts)
        # Marking the target seen keeps it from being fetched a second time from a link.
        return None if bloom.add_many([target])[0] else "duplicate"

    # --- recrawls ---------------------------------------------------------------------------
    def validators(self, opts: CrawlOptions) -> Validators | None:
        return Validators(self.client, self.keys, opts.schedule) if opts.schedule else None

    def conditional_headers(self, opts: CrawlOptions, url: str) -> dict[str, str]:
        v = self.validators(opts)
        seen = v.get(url) if v else None
        return seen.headers() if seen else {}

    def previous_links(self, opts: CrawlOptions, url: str) -> list[str]:
        """Outlinks the previous run found on ``url`` (a 304 page is not parsed again)."""
        v = self.validators(opts)
        seen = v.get(url) if v else None
        if seen is not None and v is not None:
            seen.run = opts.crawl_id
            v.put(url, seen)
        return seen.links if seen else []

    def remember(
        self, opts: CrawlOptions, url: str, headers: dict[str, str], body: bytes, links: list[str]
    ) -> str | None:
        """Store this run's validators for ``url``; returns new, changed or unchanged."""
        v = self.validators(opts)
        if v is None:
            return None
        body_digest = digest(body)
        previous = v.get(url)
        v.put(
            url,
            Seen(
                headers.get("etag"), headers.get("last-modified"), body_digest, links, opts.crawl_id
            ),
        )
        return change(previous, body_digest)

    def output(self, opts: CrawlOptions) -> CrawlOutput:
        return self.outputs.get(opts.crawl_id, opts.output or self.settings.output_dir)

    def write_warc(self, opts: CrawlOptions, response: Response) -> None:
        if not self.settings.warc_non_html and response.content_type not in (
            "text/html",
            "application/xhtml+xml",
        ):
            return
        self.output(opts).warc(
            response.final_url,
            response.status,
            "",
            response.raw_headers,
            response.body,
            [("User-Agent", opts.user_agent or self.settings.user_agent)],
            http_version=response.http_version,
            ip=response.ip,
        )

    def store_body(self, opts: CrawlOptions, url: str, meta: str, body: bytes) -> None:
        key = self.keys.crawl(opts.crawl_id).body(url)
        pipe = self.client.pipeline()
        pipe.hset(key, mapping={"meta": meta, "body": body})
        pipe.expire(key, self.settings.body_ttl)
        pipe.execute()

    def load_body(self, opts: CrawlOptions, url: str) -> tuple[dict[str, Any], bytes] | None:
        meta, body = self.client.hmget(self.keys.crawl(opts.crawl_id).body(url), "meta", "body")
        if meta is None or body is None:
            return None
        return json.loads(meta), body

    def drop_body(self, opts: CrawlOptions, url: str) -> None:
        self.client.delete(self.keys.crawl(opts.crawl_id).body(url))

    def admit_links(self, opts: CrawlOptions, links: list[str], depth: int) -> dict[str, int]:
        """Admit a page's outlinks at ``depth``; returns skip counters by reason."""
        skipped: dict[str, int] = {}
        if opts.max_depth is not None and depth > opts.max_depth:
            if links:
                skipped["skipped:max_depth"] = len(links)
            return skipped
        links = self._drop_known(opts, links)
        scope = self.scope(opts)
        keep = []
        for url in links:
            reason = scope.check(url)
            if reason is None:
                keep.append((url, depth))
            else:
                skipped[f"skipped:{reason}"] = skipped.get(f"skipped:{reason}", 0) + 1
        if keep and opts.max_pages_per_host:
            over = self._admit_per_host(opts, keep)
            if over:
                skipped["skipped:max_pages_per_host"] = over
        elif keep:
            self.frontier(opts).admit(keep)
        return skipped

    def _drop_known(self, opts: CrawlOptions, links: list[str]) -> list[str]:
        """Links this process already saw admitted or rejected as duplicates (mostly repeated
        navigation) are duplicates again: count them and skip scoping and Redis for them. A
        known URL passed the scope check before, so skip counters stay as they would be."""
        ck = self.keys.crawl(opts.crawl_id)
        known = known_urls(self.client, ck, opts.started_at)
        if known is None or not links:
            return links
        fresh, n = known.drop_known(links)
        if n:
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(ck.stats, "discovered", n)
            pipe.hincrby(ck.stats, "deduplicated", n)
            pipe.execute()
        return fresh

    def _admit_per_host(self, opts: CrawlOptions, links: list[tuple[str, int]]) -> int:
        """Admit ``links`` within each domain's ``max_pages_per_host``; returns how many were
        turned away. A domain's budget is reserved (HINCRBY) before admit.lua runs and what
        turned out to be duplicates is given back, so racing pages never push a domain past
        its cap (at worst one turns away a link another then gives room for). Seeds count: a
        domain's counter starts at its number of seeds."""
        frontier = self.frontier(opts)
        ck = self.keys.crawl(opts.crawl_id)
        cap, seeds = opts.max_pages_per_host, domain_counts(opts.seeds, opts.domain_key)
        by_domain: dict[str, list[tuple[str, int]]] = {}
        for link in links:
            by_domain.setdefault(frontier.domain_of(link[0]), []).append(link)
        over = 0
        for domain, pending in by_domain.items():
            while pending:
                pipe = self.client.pipeline()  # MULTI: the counter starts at the seeds once
                pipe.hsetnx(ck.host_pages, domain, seeds.get(domain, 0))
                pipe.hget(ck.host_pages, domain)
                room = cap - int(pipe.execute()[1])
                if room <= 0:
                    break
                if len(pending) > room:  # keep seen links from eating the room, round by round
                    pending = self._unseen(opts, pending)
                want = min(len(pending), room)
                take = want - max(0, int(self.client.hincrby(ck.host_pages, domain, want)) - cap)
                admitted = frontier.admit(pending[:take]).admitted if take > 0 else 0
                if admitted < want:
                    self.client.hincrby(ck.host_pages, domain, admitted - want)
                if take <= 0:
                    break
                pending = pending[take:]
            over += len(pending)
        return over

    def _unseen(self, opts: CrawlOptions, links: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """``links`` minus those already in the crawl's Bloom filter (read-only; counted as
        admit.lua counts duplicates)."""
        ck = self.keys.crawl(opts.crawl_id)
        bloom = BloomFilter(self.client, ck, opts.bloom, self.scripts)
        present = bloom.contains_many([url for url, _ in links])
        fresh = [link for link, known in zip(links, present, strict=True) if not known]
        if len(fresh) < len(links):
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(ck.stats, "discovered", len(links) - len(fresh))
            pipe.hincrby(ck.stats, "deduplicated", len(links) - len(fresh))
            pipe.execute()
        return fresh

    def crawl_finished(self, opts: CrawlOptions) -> None:
        """Runs once per crawl, in the worker whose finish.lua emptied it."""
        state = self.state(opts.crawl_id)
        v = self.validators(opts)
        if v is not None:
            self.client.hset(
                self.keys.crawl(opts.crawl_id).stats, "change:gone", v.gone(opts.crawl_id)
            )
        summary = state.summary()
        ck = self.keys.crawl(opts.crawl_id)
        directory = f"{opts.output or self.settings.output_dir}/{opts.crawl_id}"
        path = write_summary(directory, summary)
        self.client.hset(ck.state, "summary_path", str(path))
        for key in self.client.scan_iter(match=f"{ck.base}:*", count=1000):
            self.client.expire(key, self.settings.finished_ttl)
        events.emit(self.client, ck, "crawl_finished", opts.crawl_id, summary=summary)
        if opts.on_finished:
            self._on_finished(opts.on_finished, opts.crawl_id, summary)
        log.info("crawl %s %s in %.1fs", opts.crawl_id, summary["status"], summary["duration_s"])
