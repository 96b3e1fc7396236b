"""Every format Python and the Lua scripts share, and the names of outcomes and statuses.

The Lua side reads and writes these too; each format says which scripts depend on it, so a
change here is a change there (``tests/integration/test_formats.py`` runs the scripts against these
functions).

* frontier entry (per-domain queue lists; admit.lua, release.lua, requeue.lua)::

      "depth|url"

* inflight value (``CrawlKeys.inflight``, url -> value; release.lua writes it, start.lua
  appends the stage and worker, finish.lua / requeue.lua delete it)::

      "domain|released_at|depth"            released_at: unix seconds, 0 for a drain
      "domain|released_at|depth|r:WORKER"   released by the dispatcher of WORKER (release.lua)
      "domain|released_at|depth|s:WORKER"   its fetch task began in WORKER (start.lua)
      "domain|released_at|depth|q:SECONDS"  fetched; its parse task published at unix SECONDS
      "domain|released_at|depth|p:WORKER"   its parse task began in WORKER

* worker heartbeat (``Keys.workers``, worker id -> unix seconds): every worker process
  beats; a URL started by a worker that stopped beating is reclaimed by the dispatcher.

* retry member (``CrawlKeys.retry`` zset, scored by due time; requeue.lua, release.lua)::

      "domain<TAB>depth|url"

* unwritten record (``CrawlKeys.unwritten``, url -> value; finish.lua stores it, the recorder
  deletes it once the record is on disk; start.lua reports it)::

      {"rid": record id, "path": the writer's pages file, "ts": unix seconds, "record": {...}}

* archived WARC records (``CrawlKeys.archived``; archive_*.lua): :class:`ArchiveSlot`

Counter names (``CrawlKeys.stats`` hash) are declared in :mod:`.counters` (re-exported here):
:class:`Counter` members or one of the families built by :func:`status_code`, :func:`failed`,
:func:`skipped`, :func:`change` and :func:`links_dropped`. Outcome reasons (the ``error`` of a
page record) are the ``reason`` of an exception in :mod:`crawler_tasks.errors` or an
:class:`Outcome`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

# The counters' declaration has a module of its own; their names are imported from here too.
from .counters import FAMILIES as FAMILIES
from .counters import FAMILY_PREFIXES as FAMILY_PREFIXES
from .counters import Counter as Counter
from .counters import Group as Group
from .counters import Shown as Shown
from .counters import change as change
from .counters import failed as failed
from .counters import links_dropped as links_dropped
from .counters import skipped as skipped
from .counters import status_code as status_code
from .word import Word as Word


class Status(Word):
    """A crawl's ``status`` (its state hash). finishing.lua writes FINISHING and the final
    one; ``tests/integration/test_formats.py`` runs it against these values."""

    RUNNING = "running"  # its URLs are released and fetched
    PAUSED = "paused"  # nothing released; URLs in flight finish (pause, resume)
    #: Cancelled, its pending URLs being counted as cancelled in bulk (cancel.lua) and its
    #: URLs in flight coming back: no pace, no ETA; then finishing and cancelled.
    CANCELLING = "cancelling"
    FINISHING = "finishing"  # drained; its finisher writes summary.json, then the final status
    FINISHED = "finished"  # every URL final, summary.json and its end steps done
    CANCELLED = "cancelled"  # ended by a cancel (or a hook no worker imports), summary written
    UNKNOWN = "unknown"  # never stored: what a crawl without a state hash shows

    @property
    def final(self) -> bool:
        return self in (Status.FINISHED, Status.CANCELLED)


class Steering(Word):
    """What the dispatcher does with a crawl; release.lua gets it as its last argument."""

    RUN = "run"
    PAUSED = "paused"
    CANCELLED = "cancelled"  # nothing released: the frontier is counted cancelled (cancel.lua)
    FINISHING = "finishing"  # nothing to release: finish it (the dispatcher never sends it)


class Outcome(Word):
    """Final states of a URL that are not an exception of the fetcher."""

    ROBOTS_DISALLOWED = "robots_disallowed"
    ROBOTS_UNREACHABLE = "robots_unreachable"
    CANCELLED = "cancelled"
    BODY_LOST = "body_lost"  # the fetched body expired before its parse task ran
    CLIENT_ERROR = "client_error"
    NOT_MODIFIED = "not_modified"  # a recrawl's 304 (a change kind, not an error)
    REDIRECT_OUT_OF_SCOPE = "redirect_out_of_scope"
    REDIRECT_DUPLICATE = "redirect_duplicate"
    REDIRECT_NOT_FOLLOWED = "redirect_not_followed"
    SITEMAP_STATUS = "sitemap_status"
    SITEMAP_INVALID = "sitemap_invalid"


class RenderMode(Word):
    """The ``render`` option, and render_plan.lua's per-host decision under ``auto``."""

    NEVER = "never"
    ALWAYS = "always"
    AUTO = "auto"


class RenderVerdict(Word):
    """render_plan.lua's state of one host under ``auto`` (its "mode" field)."""

    SAMPLING = "sampling"  # its first pages are rendered and compared with their raw parse
    RENDER = "render"  # rendering added links or text: every page is rendered
    RAW = "raw"  # it did not: pages are parsed as fetched, one in SPOT_CHECK still rendered


class RenderAsk(int, Enum):
    """render_plan.lua's "render this page?": RAW (no, falsy), TENTATIVE (its host samples:
    asked again as its render starts), FIRM (``always``, host "render", a spot check)."""

    RAW, TENTATIVE, FIRM = 0, 1, 2


class RenderRecheck(int, Enum):
    """render_plan.lua's answer when the render of a page asked TENTATIVE starts."""

    RENDER, RAW, WAIT = 0, 1, 2  # (one of) its sample; decided "raw" since; sample rendering


class LeaseEnd(Word):
    """How the lease of a released URL ends: done.lua's event (ARGV[3]; see its header)."""

    OK = "ok"  # a response, paced from when the request was sent
    ERROR = "error"  # a timeout, a 5xx, a reset: paced from now, slowed down
    THROTTLE = "throttle"  # 429/503: the pace halves, Retry-After honoured
    DOWN = "down"  # could not connect: as error, and the host's circuit breaker counts it
    EXTRA = "extra"  # a request the release did not pay for (robots.txt): charged, no lease
    REFUND = "refund"  # the request will not be sent: its token given back, lease returned


class Started(int, Enum):
    """start.lua's reply for one URL: what the task that begins it should do."""

    DUPLICATE = 0  # not in flight: a duplicate delivery, nothing to do
    GO_ON = 1  # in flight: the task goes on
    UNRECORDED = 2  # final, but the process that finished it died before its record
    CANCELLED = 3  # (fetch only) the crawl was cancelled
    HOST_DEAD = 4  # (fetch only) its host was declared dead in this crawl (done.lua)


class Begun(NamedTuple):
    """start.lua's reply for a URL: its code; for a fetch that goes on, seconds from ``at``
    (time.monotonic() at the reply; ``asked``: before the call) to its host's send slot
    (gate_lib.lua), and whether its host's next URL waits for this lease (release.lua's aw)."""

    code: int
    wait: float = 0.0
    at: float = 0.0
    awaited: bool = False
    asked: float = 0.0


class Committed(int, Enum):
    """commit.lua's reply: what a writer does with the record it has just appended."""

    MOVED = 0  # another process claimed the record meanwhile (this one was frozen): undo it
    OURS = 1  # the entry was this writer's: now marked written
    FOUND = 2  # gone, and nobody claimed it: a sweep found this copy on disk; keep it


#: The crawl state's field naming its first TLS failure ("https://host: tls_error: ..."),
#: shown by ``status`` and the summary.
TLS_NOTE = "tls_error_why"


# --- frontier entries -----------------------------------------------------------------------
def entry(depth: int, url: str) -> str:
    return f"{depth}|{url}"


def parse_entry(value: str) -> tuple[int, str]:
    depth, _, url = value.partition("|")
    return int(depth), url


def retry_member(domain: str, depth: int, url: str) -> str:
    return f"{domain}\t{entry(depth, url)}"


# --- inflight values ------------------------------------------------------------------------
@dataclass(frozen=True)
class Inflight:
    domain: str
    released_at: float  # 0: handed out by a cancel drain
    depth: int
    #: "r" released, "s" fetch started, "q" parse queued, "p" parse started, "v" render
    #: queued, "w" render started
    stage: str = ""
    #: the stage's process ("r": its host's holder, else the releaser; for "q" and "v": unix s)
    worker: str = ""

    @property
    def started(self) -> bool:
        """A task began work on it (fetch, parse or render)."""
        return self.stage in ("s", "q", "p", "v", "w")

    @classmethod
    def parse(cls, value: str) -> Inflight:
        domain, released, depth, *rest = value.split("|", 3)
        stage, _, worker = rest[0].partition(":") if rest else ("", "", "")
        return cls(domain, float(released), int(depth), stage, worker)


# --- unwritten records ----------------------------------------------------------------------
_COMPACT: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":")}


@dataclass(frozen=True)
class Unwritten:
    rid: str  # also the record's "rid": how a writer finds out the record is on disk
    path: str  # the pages file of the process that finished the URL
    ts: float
    record: dict[str, Any]
    #: ``record`` as _COMPACT JSON, when the caller has it already (output.page_text)
    text: str | None = field(default=None, compare=False, repr=False)

    def dumps(self) -> str:
        return self.head() + (self.text or json.dumps(self.record, **_COMPACT)) + "}"

    def head(self) -> str:
        """The text :meth:`dumps` begins with, up to its record: what commit.lua compares the
        stored entry with instead of decoding the whole record (KBs of outlinks). Exact, since
        every stored entry was written by :meth:`dumps` (finish.lua's and claim.lua's)."""
        value = {"rid": self.rid, "path": self.path, "ts": self.ts}
        return json.dumps(value, **_COMPACT)[:-1] + ',"record":'

    def fence(self) -> str:
        """What claim.lua fences the URL's earlier writers with and commit.lua compares: this
        writer's file AND time, since a claimer may write to the very file of the writer it
        fences (its own process's slow thread), where the file alone told them apart from
        nothing."""
        return f"{self.path}|{self.ts!r}"

    @classmethod
    def loads(cls, raw: str | bytes) -> Unwritten:
        v = json.loads(raw)
        return cls(v["rid"], v["path"], float(v["ts"]), v["record"])


class ArchiveSlot(NamedTuple):  # a WARC writer's reservation (CrawlKeys.archived), as JSON
    rid: str  # the WARC-Record-ID of the URL's records
    path: str  # the writer's WARC file
    at: int  # its size before the append (grown past it: the records are there)


class Segment(NamedTuple):
    """A staged segment file of an s3:// crawl not yet uploaded (``Keys.segments``), as
    "state|host|pid|at": ``state`` "open" (its process still appends) or "closed"."""

    state: str
    host: str
    pid: int
    at: float

    def dumps(self) -> str:
        return f"{self.state}|{self.host}|{self.pid}|{self.at:.3f}"

    @classmethod
    def loads(cls, raw: str | bytes) -> Segment:
        text = raw.decode() if isinstance(raw, bytes) else raw
        state, host, pid, at = text.split("|")
        return cls(state, host, int(pid), float(at))


class ArchivePlace(int, Enum):
    """archive_reserve.lua's first reply: what a WARC writer does (state/archive.py)."""

    ARCHIVED = 0  # the URL's records are archived already: write none (their id follows)
    WRITE = 1  # the place is this writer's now
    PENDING = 2  # another writer reserved it and did not commit yet (its slot follows)
