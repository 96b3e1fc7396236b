"""The uploads of an s3:// crawl's staged segments (segments.py): one thread per process.

Every :data:`TICK` seconds (at once when a crawl it writes for ends: :class:`Ends`) it closes this process's segments that are due (past
``output_segment_bytes`` or ``output_segment_seconds``, or of a crawl that ended), notes in
Redis what is staged (state/segments.py: ``crawler status`` says what waits; a new segment is
noted by its writer as its file is created, before its first record, so that a reader who
finds nothing waiting finds every record in the store), and uploads every
closed segment of this host that no live process appends to: this process's own, and those
left by dead processes (a process killed mid-crawl: the next one started on this host uploads
them). Each file is PUT under its own name, then recorded as uploaded (segment_uploaded.lua),
then deleted here. A kill anywhere on that path leaves the file staged, and its upload is
repeated whole under the same name: the store holds every committed record once, never a
second object of it. A file is locked (flock) while it is uploaded, so two uploaders of a host
never send it at once.

The store away (down, partitioned, refusing): the upload is tried again with a back-off (1 s
doubling to a minute) per store, while the staging directory keeps growing; its full-disk
rule is the local output's (files.py), and everything staged arrives once the store is back.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import redis

from ...errors import CrawlerError
from ...state import objects
from ...state.formats import Status
from ...state.keys import Keys
from ...state.objects import s3
from ...state.segments import Segments
from ..process import faults
from ..process.logs import Throttled
from .outputs import Outputs
from .segments import SegmentName, alive, parse, staged_crawls

log = logging.getLogger(__name__)

#: Seconds between two rounds (a closed segment is uploaded within about this).
TICK = 1.0
#: Seconds the wait for a crawl's end (Ends.wait) checks whether the uploader stops.
STOP_SLICE = 0.1
#: Longest back-off after failed uploads to one store.
MAX_BACKOFF = 60.0


class Uploads:
    """Started on creation; :meth:`stop` closes this process's segments and uploads them
    (within ``grace`` seconds: what is left is uploaded by the next process on this host)."""

    def __init__(
        self,
        outputs: Outputs,
        root: str,
        client: redis.Redis,
        keys: Keys,
        max_bytes: int,
        max_age: float,
    ) -> None:
        self.outputs, self.root, self.client, self.keys = outputs, Path(root), client, keys
        self.max_bytes, self.max_age = max_bytes, max_age
        self.pid = os.getpid()
        self._noted: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._failing = Throttled(log, "uploading staged output", every=30.0)
        outputs.on_segment = self._opened
        self._stop = threading.Event()
        self._ends = Ends(client, keys, self._stop)
        self._warm = False
        self._thread = threading.Thread(target=self._run, name="crawler-uploads", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._ends.wait(TICK)
            if self._stop.is_set():
                self._ends.close()  # here: its connection is this thread's alone
                return
            try:
                self.round()
            except Exception as exc:  # Redis away: the next round tries again
                self._failing.failed(exc, expected=isinstance(exc, redis.RedisError))

    def stop(self, grace: float = 20.0) -> None:
        """After the outputs are closed (Context.close): their last segments go now."""
        self._stop.set()
        self._thread.join(5)
        deadline = time.monotonic() + grace
        with contextlib.suppress(Exception):
            self.round(deadline)

    def round(self, deadline: float | None = None) -> None:
        self._close_due()
        current = {out.segmenting.seq for _, out in self.outputs.segmented() if out.segmenting}
        for directory, url in staged_crawls(self.root):
            if deadline is not None and time.monotonic() > deadline:
                return
            if time.monotonic() < self._retry_at.get(url, 0.0):
                continue
            self._upload_crawl(directory, url, current)

    def _close_due(self) -> None:
        """Close this process's segments that are due; note the open ones in Redis."""
        segmented = self.outputs.segmented()
        if segmented:
            self._warm_client()
        self._ends.follow(crawl_id for crawl_id, _ in segmented)
        for crawl_id, out in segmented:
            seg = out.segmenting
            written = out.written()
            if seg is None or not written:
                continue
            segments = Segments(self.client, self.keys, crawl_id)
            due = max(written.values()) >= self.max_bytes or seg.age() >= self.max_age
            if due or self._ended(crawl_id):
                out.close()  # the next write starts the next segment
                segments.note(written, "closed", *self._me())
                continue
            new = [n for n in written if n not in self._noted]
            if new:
                segments.note(new, "open", *self._me())
                self._noted.update(new)

    def _warm_client(self) -> None:
        """This process's S3 client, made here once an s3:// crawl writes in it: boto3's
        import and the client (~0.5 s of CPU) were paid by the first PUT, the finisher's
        summary.json on the crawl's critical path, when no segment was uploaded before."""
        if not self._warm:
            self._warm = True
            with contextlib.suppress(CrawlerError):  # no boto3: the first PUT says so
                s3.client()

    def _opened(self, crawl_id: str, name: str) -> None:
        """A segment file just created (by a writer's thread): noted waiting before its first
        record, where the next round noted it up to :data:`TICK` later."""
        Segments(self.client, self.keys, crawl_id).note([name], "open", *self._me())
        self._noted.add(name)

    def _me(self) -> tuple[str, int]:
        return self.outputs.tag.rsplit("-", 1)[0], self.pid

    def _ended(self, crawl_id: str) -> bool:
        state = self.keys.crawl(crawl_id).state
        raw = self.client.hget(state, "status")
        try:
            return raw is not None and Status(raw.decode()).final
        except ValueError:
            return False

    def _upload_crawl(self, directory: Path, url: str, current: set[int]) -> None:
        crawl_id = directory.name
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        segments: Segments | None = None
        for name in names:
            seg = parse(name)
            if seg is None or not self._closed(seg, current):
                continue
            segments = segments or Segments(self.client, self.keys, crawl_id)
            try:
                self.upload(directory / name, objects.store_for(url).child(crawl_id), segments)
            except CrawlerError as exc:  # StoreUnavailable: later, with a back-off
                delay = min(self._backoff.get(url, 0.5) * 2, MAX_BACKOFF)
                self._backoff[url], self._retry_at[url] = delay, time.monotonic() + delay
                self._failing.failed(exc)
                return
            self._backoff.pop(url, None)
            self._failing.ok()

    def _closed(self, seg: SegmentName, current: set[int]) -> bool:
        """No live process appends to it: one of this process's past segments, or any of a
        dead process of this host (a live one uploads its own)."""
        if seg.host != self._me()[0]:
            return False
        if seg.pid == self.pid and seg.run == self.outputs.run:
            return seg.seq not in current
        return not alive(seg)

    def upload(self, path: Path, store: objects.ObjectStore, segments: Segments) -> None:
        """PUT ``path`` under its name, record it, delete it; a kill anywhere repeats it."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # uploaded meanwhile by another process of this host
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another uploader has it
            if not path.exists():
                return  # uploaded and deleted while this one waited for the lock
            size = os.fstat(fd).st_size
            faults.point("before_upload")
            store.put_file(path.name, path)
            faults.point("after_upload")
            segments.uploaded(path.name, size)
            faults.point("after_upload_noted")
            path.unlink(missing_ok=True)
            self._noted.discard(path.name)
        finally:
            os.close(fd)


class Ends:
    """The uploader's pause between rounds: :data:`TICK` seconds, cut short when a crawl whose
    segments this process writes ends (its finisher publishes on the crawl's ``ended``
    channel, state/finisher.py), so that its last segments are closed and uploaded at once.
    Without Redis (or before a crawl is followed) it is the plain tick."""

    def __init__(self, client: redis.Redis, keys: Keys, stop: threading.Event) -> None:
        self.client, self.keys, self.stop = client, keys, stop
        self._pubsub: redis.client.PubSub | None = None
        self._channels: set[str] = set()

    def follow(self, crawl_ids: Iterable[str]) -> None:
        """Listen for the end of these crawls, and no longer of the others."""
        wanted = {self.keys.crawl(c).ended for c in crawl_ids}
        if wanted == self._channels:
            return
        if self._pubsub is None:
            self._pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        if wanted - self._channels:
            self._pubsub.subscribe(*(wanted - self._channels))
        if self._channels - wanted:
            self._pubsub.unsubscribe(*(self._channels - wanted))
        self._channels = wanted

    def wait(self, seconds: float) -> None:
        """Until ``seconds`` passed, a followed crawl ended or the uploader stops (the socket
        is watched in slices of :data:`STOP_SLICE`, so a stop is not held a whole tick)."""
        if self._pubsub is None or not self._channels:
            self.stop.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        try:
            while not self.stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0 or self._pubsub.get_message(timeout=min(left, STOP_SLICE)):
                    return
        except (redis.RedisError, OSError):  # away: listened to again by the next round
            self.close()
            self.stop.wait(max(deadline - time.monotonic(), 0.0))

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self._pubsub.close()
        self._pubsub, self._channels = None, set()
