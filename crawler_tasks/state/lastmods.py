"""Sitemap ``lastmod`` dates in a schedule's runs, and how accurate each host's have proven.

A run notes the lastmod of every URL its sitemaps list, with the run's id (``note``): only the
current run's are used, as a date read by an earlier run says nothing of a change since. Each
visit of a URL whose lastmod this run read, and which an earlier run visited, checks it
(``check``): the lastmod agreed if it is after the previous visit exactly when the page was
found changed (a 304 or the same content: not changed). Per host, the checks and the agreements
are counted (``P:sched:S:lastmod_acc``); a host's lastmods decide due-ness (web/change_rate.py
``lastmod_trusted``: 20 checks, 95 % agreed) once proven, never before.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis

from ..web.change_rate import lastmod_agrees, lastmod_trusted
from .keys import Keys


def host_of(url: str) -> str:
    return urlsplit(url).hostname or ""


class LastMods:
    def __init__(self, client: redis.Redis, keys: Keys, schedule: str) -> None:
        self.client = client
        self.key = keys.schedule_lastmods(schedule)
        self.accuracy_key = keys.schedule_lastmod_accuracy(schedule)

    def note(self, run: str, lastmods: dict[str, float]) -> None:
        if lastmods:
            self.client.hset(self.key, mapping={u: f"{t!r} {run}" for u, t in lastmods.items()})

    def get(self, url: str, run: str) -> float | None:
        """``url``'s lastmod as run ``run`` read it (None: this run read none)."""
        raw = self.client.hget(self.key, url)
        if raw is None:
            return None
        when, _, by = raw.decode().partition(" ")
        return float(when) if by == run else None

    def check(self, url: str, lastmod: float, previous_visit: float, changed: bool) -> None:
        host = host_of(url)
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(self.accuracy_key, f"{host}:checks", 1)
        pipe.hincrby(
            self.accuracy_key,
            f"{host}:agreed",
            int(lastmod_agrees(lastmod, previous_visit, changed)),
        )
        pipe.execute()

    def trusted(self, url: str) -> bool:
        host = host_of(url)
        checks, agreed = self.client.hmget(self.accuracy_key, f"{host}:checks", f"{host}:agreed")
        return lastmod_trusted(int(checks or 0), int(agreed or 0))

    def forget(self, urls: list[str]) -> None:
        for i in range(0, len(urls), 1000):
            self.client.hdel(self.key, *urls[i : i + 1000])
