"""The Redis side of an s3:// crawl's uploads (worker/output/uploads.py): which staged segment
files wait for their upload, where, and which are in the store.

A process notes each segment it writes as ``open`` and, once it closes it, ``closed``; the
upload deletes the entry and records the object in the same script (segment_uploaded.lua).
``crawler status`` reads :meth:`Segments.waiting`: segments waiting, and those *stranded*,
left on a host where no worker runs any more (only a process started on that host can upload
them: the files are on its disk).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

import redis

from .formats import Segment
from .keys import Keys
from .scripts import source


class Waiting(NamedTuple):
    """Segments not yet in the store: ``waiting`` in all, ``stranded`` of them on hosts without a
    live worker (``hosts``), and the age of the oldest closed one in seconds."""

    waiting: int = 0
    stranded: int = 0
    hosts: tuple[str, ...] = ()
    oldest_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "waiting": self.waiting,
            "stranded": self.stranded,
            "stranded_hosts": list(self.hosts),
            "oldest_s": round(self.oldest_s, 1),
        }

    def line(self) -> str:
        """What status says (empty when nothing waits)."""
        if not self.waiting:
            return ""
        text = f"{self.waiting} segments waiting to upload"
        if self.stranded:
            text += f", {self.stranded} stranded on {', '.join(self.hosts)} (no worker runs there)"
        return text


class Segments:
    def __init__(self, client: redis.Redis, keys: Keys, crawl_id: str) -> None:
        self.client, self.crawl_id = client, crawl_id
        self.key, self.done = keys.segments(crawl_id), keys.uploaded(crawl_id)
        self._uploaded = client.register_script(source("segment_uploaded"))

    def note(self, names: Iterable[str], state: str, host: str, pid: int) -> None:
        """``names`` are staged in ``state`` ("open" or "closed") by process ``host``/``pid``."""
        value = Segment(state, host, pid, time.time()).dumps()
        mapping = dict.fromkeys(names, value)
        if mapping:
            self.client.hset(self.key, mapping=mapping)

    def uploaded(self, name: str, size: int) -> bool:
        """``name``'s object is in the store; True the first time it is said."""
        return bool(self._uploaded(keys=[self.key, self.done], args=[name, size]))

    def is_uploaded(self, name: str) -> bool:
        return bool(self.client.hexists(self.done, name))

    def uploaded_size(self, name: str) -> int | None:
        """``name``'s size as uploaded; None while it is not in the store."""
        size = self.client.hget(self.done, name)
        return None if size is None else int(size)

    def uploaded_names(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.client.hgetall(self.done).items()}

    def waiting(self, alive: set[str]) -> Waiting:
        """From the live workers' ids ("host-pid", workers.alive)."""
        entries = [Segment.loads(v) for v in self.client.hgetall(self.key).values()]
        if not entries:
            return Waiting()
        live_hosts = {w.rsplit("-", 1)[0] for w in alive}
        stranded = [e for e in entries if e.host not in live_hosts]
        closed = [e.at for e in entries if e.state == "closed"]
        oldest = time.time() - min(closed) if closed else 0.0
        hosts = tuple(sorted({e.host for e in stranded}))
        return Waiting(len(entries), len(stranded), hosts, max(oldest, 0.0))
