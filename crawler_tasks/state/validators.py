"""What a recrawl remembers of the previous run of its schedule, per URL: the HTTP validators
(ETag, Last-Modified) to send back as If-None-Match / If-Modified-Since, a content hash (to
call a page ``unchanged`` even without validators), its outlinks (so a 304 page still leads the
crawl to the pages it links to) and the crawl id that last saw it (to count ``gone`` pages).

One Redis hash per schedule, ``url -> zlib(JSON)``: about 100-300 bytes for a page with a few
dozen links.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import redis

from ..web.change_rate import Visits
from . import formats
from .captures import Captures
from .formats import Counter, Outcome
from .keys import Keys
from .lastmods import LastMods


@dataclass
class Seen:
    etag: str | None = None
    last_modified: str | None = None
    digest: str | None = None
    links: list[str] = field(default_factory=list)
    run: str = ""
    #: The URL's visits as the change-rate estimator needs them: web/change_rate.Visits's
    #: fields in order ([] before the first), recorded by every run, adaptive or not.
    visits: list[float] = field(default_factory=list)

    def observed(self, now: float, changed: bool) -> list[float]:
        v = Visits(*self.visits).observed(now, changed)  # type: ignore[arg-type]
        return [v.visits, v.changes, v.first, v.last, v.before_last]

    def headers(self) -> dict[str, str]:
        h = {}
        if self.etag:
            h["If-None-Match"] = self.etag
        if self.last_modified:
            h["If-Modified-Since"] = self.last_modified
        return h


def digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


class Validators:
    def __init__(self, client: redis.Redis, keys: Keys, schedule: str) -> None:
        self.client = client
        self.key = keys.schedule_validators(schedule)
        #: The last full WARC capture of each URL (revisit records), forgotten with it.
        self.captures = Captures(client, keys, schedule)
        #: Sitemap lastmods and their accuracy per host (adaptive schedules).
        self.lastmods = LastMods(client, keys, schedule)

    def get(self, url: str) -> Seen | None:
        raw = self.client.hget(self.key, url)
        if raw is None:
            return None
        data = json.loads(zlib.decompress(raw))
        return Seen(**data)

    def put(self, url: str, seen: Seen) -> None:
        packed = zlib.compress(json.dumps(seen.__dict__, separators=(",", ":")).encode(), 6)
        self.client.hset(self.key, url, packed)

    def gone(self, run: str) -> int:
        """Pages the previous runs saw and run ``run`` did not; forgets them."""
        stale = []
        for url, raw in self.client.hscan_iter(self.key, count=1000):
            if json.loads(zlib.decompress(raw)).get("run") != run:
                stale.append(url)
        for i in range(0, len(stale), 1000):
            self.client.hdel(self.key, *stale[i : i + 1000])
        self.captures.forget(url.decode("utf-8", "surrogateescape") for url in stale)
        self.lastmods.forget(stale)
        return len(stale)


#: Change kinds of a page a previous run had seen (``new`` is not a revisit, ``gone`` not a
#: fetch).
_REVISITED = {"changed", "unchanged", Outcome.NOT_MODIFIED.value}


def change_counters(kind: str) -> dict[str, int]:
    """The counters a page's change kind adds: its ``change:*`` and the revisit figures."""
    counters = {formats.change(kind): 1}
    if kind in _REVISITED:
        counters[Counter.REVISITS.value] = 1
        if kind == "changed":
            counters[Counter.REVISITS_CHANGED.value] = 1
    return counters


class Freshness(NamedTuple):
    """A run's freshness figures (``crawler schedule list``): revisits, the share of them that
    found a change (None without revisits), pages not due, revisit records and the bytes
    they saved."""

    revisits: int
    changed_share: float | None
    not_due: int
    revisit_records: int
    revisit_bytes_saved: int


def freshness(counters: Mapping[str, int]) -> Freshness:
    """A run's :class:`Freshness` from its counters."""
    revisits = counters.get(Counter.REVISITS.value, 0)
    changed = counters.get(Counter.REVISITS_CHANGED.value, 0)
    return Freshness(
        revisits=revisits,
        changed_share=round(changed / revisits, 4) if revisits else None,
        not_due=counters.get(Counter.NOT_DUE.value, 0),
        revisit_records=counters.get(Counter.REVISIT_RECORDS.value, 0),
        revisit_bytes_saved=counters.get(Counter.REVISIT_BYTES_SAVED.value, 0),
    )


def change(previous: Seen | None, body_digest: str) -> str:
    """new | changed | unchanged, for a page fetched with a 200."""
    if previous is None:
        return "new"
    return "unchanged" if previous.digest == body_digest else "changed"


class Recrawl:
    """The validators of one run (crawl ``run``) of a schedule, as the pipeline uses them.
    ``now``: the run's time (its start), which its visits count as and due-ness is measured
    against; ``bounds``: an adaptive schedule's (min_interval, max_interval), None for one
    that visits every page each run."""

    def __init__(
        self,
        validators: Validators,
        run: str,
        now: float = 0.0,
        bounds: tuple[float, float] | None = None,
    ) -> None:
        self.validators = validators
        self.run = run
        self.now = now
        self.bounds = bounds
        self.captures = validators.captures
        self.lastmods = validators.lastmods

    def not_due(self, url: str) -> Seen | None:
        """An adaptive schedule's page seen before and not due at this run's time: what the
        schedule remembers of it (its previous links: it is not fetched); None otherwise.
        Only read: :meth:`skipped` marks it seen by this run."""
        if self.bounds is None:
            return None
        seen = self.validators.get(url)
        if seen is None or self._due(url, Visits(*seen.visits), self.bounds):  # type: ignore[arg-type]
            return None
        return seen

    def skipped(self, url: str, seen: Seen) -> None:
        """A page not due (``seen``: :meth:`not_due`'s) counts as seen by this run: not
        ``gone`` at its end."""
        seen.run = self.run
        self.validators.put(url, seen)

    def conditional_headers(self, url: str) -> dict[str, str]:
        seen = self.validators.get(url)
        return seen.headers() if seen else {}

    def _due(self, url: str, visits: Visits, bounds: tuple[float, float]) -> bool:
        """By this run's sitemap lastmod if the host's have proven accurate (changed since the
        last visit), else by the estimator's interval."""
        lastmod = self.lastmods.get(url, self.run)
        if lastmod is not None and visits.last and self.lastmods.trusted(url):
            return lastmod > visits.last
        return self.now >= visits.due_at(*bounds)

    def note_lastmods(self, lastmods: dict[str, float]) -> None:
        """The lastmods of a sitemap this run read (normalised URLs)."""
        self.lastmods.note(self.run, lastmods)

    def _check_lastmod(self, url: str, previous: Seen | None, changed: bool) -> None:
        """A visit of a page an earlier run visited checks this run's lastmod of it."""
        last = Visits(*previous.visits).last if previous and previous.visits else 0.0  # type: ignore[arg-type]
        if not last or last >= self.now:
            return
        lastmod = self.lastmods.get(url, self.run)
        if lastmod is not None:
            self.lastmods.check(url, lastmod, last, changed)

    def previous_links(self, url: str) -> list[str]:
        """Outlinks the previous run found on ``url`` (a 304 page is not parsed again); the
        page counts as seen by this run."""
        seen = self.validators.get(url)
        if seen is None:
            return []
        seen.run = self.run
        self._check_lastmod(url, seen, False)
        seen.visits = seen.observed(self.now, False)
        self.validators.put(url, seen)
        return seen.links

    def remember(self, url: str, headers: dict[str, str], body: bytes, links: list[str]) -> str:
        """Store this run's validators for ``url``; returns new, changed or unchanged."""
        body_digest = digest(body)
        previous = self.validators.get(url)
        kind = change(previous, body_digest)
        seen = Seen(headers.get("etag"), headers.get("last-modified"), body_digest, links, self.run)
        self._check_lastmod(url, previous, kind == "changed")
        seen.visits = (previous or seen).observed(self.now, kind == "changed")
        self.validators.put(url, seen)
        return kind

    def gone(self) -> int:
        return self.validators.gone(self.run)
