"""Where each process wrote a crawl's files, for the readers of a crawl with local output.

Every worker process writes a crawl's records under its own ``CRAWLER_OUTPUT_DIR`` (unless
the crawl names one directory for all), so on one machine with workers started in different
directories, or on several machines, a crawl's files are in several directories. Each process
notes here, before it writes its first file of a crawl, its host name, the absolute directory
and its process id; the readers (``crawler export``, ``Crawl.pages()``) read every directory
noted, and say which they cannot read instead of exporting part of the crawl in silence
(surface/places.py). An s3:// crawl's readers read the store and need none of this.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import redis


class Written(NamedTuple):
    """One process's place: the host it ran on, the directory of the crawl's files there."""

    host: str
    dir: str
    pid: int

    @property
    def tag(self) -> str:
        """The writer's tag in its file names (``pages-<host>-<pid>.jsonl``)."""
        return f"{self.host}-{self.pid}"


class OutputPlaces:
    def __init__(self, client: redis.Redis, key: str) -> None:
        """``key``: the crawl's ``CrawlKeys.places``."""
        self.client, self.key = client, key

    def note(self, place: Written) -> None:
        """``place`` is where its process writes the crawl's files (said again on each open
        of the crawl's output in that process: the same field, nothing added)."""
        value = json.dumps({"host": place.host, "dir": place.dir, "pid": place.pid})
        self.client.hset(self.key, place.tag, value)

    def read(self) -> list[Written]:
        """Every process's place, sorted by host, directory and pid."""
        found = []
        for raw in self.client.hvals(self.key):
            entry = json.loads(raw)
            found.append(Written(entry["host"], entry["dir"], int(entry["pid"])))
        return sorted(found)
