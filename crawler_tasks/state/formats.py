"""Every format Python and the Lua scripts share, and the names of counters and outcomes.

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

Counter names (``CrawlKeys.stats`` hash) are :class:`Counter` members or one of the families
built by :func:`status`, :func:`failed`, :func:`skipped`, :func:`change` and
:func:`links_dropped`. Outcome reasons (the ``error`` of a page record) are the ``reason`` of
an exception in :mod:`crawler_tasks.errors` or an :class:`Outcome`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple


class Word(str, Enum):
    """A value that is one word of the Lua side's: ``str()`` (and f-strings) give the word."""

    def __str__(self) -> str:
        return self.value


class Shown(Enum):
    """Where ``progress()`` (and so ``crawler status``) shows a counter."""

    NO = "not shown"
    EARLY = "before the live figures (retrying, in_flight, outstanding)"
    LATE = "after the live figures"


class Group(Enum):
    """The part of a crawl a counter belongs to: every view (``status``, the summary, the
    dashboard, Prometheus's help) groups and orders the counters so, in declaration order."""

    FRONTIER = "frontier"
    PAGES = "pages"
    NOT_FETCHED = "not fetched"
    RENDER = "rendering"
    EXTRACTION = "extraction"
    SITEMAPS = "sitemaps"
    RECRAWL = "recrawl"


# Short names for the declaration below.
F, P, N, R, E, S, RC = (Group.FRONTIER, Group.PAGES, Group.NOT_FETCHED, Group.RENDER,
                        Group.EXTRACTION, Group.SITEMAPS, Group.RECRAWL)  # fmt: skip


class Counter(Word):
    """Counters of a crawl's stats hash (``summary.json``'s ``counters``): the one
    declaration every view of them reads (names, groups, help text).

    Each member says its :class:`Group`, where ``progress()`` shows it (:class:`Shown`;
    progress keeps the order of declaration), its help text (Prometheus, the dashboard's
    tooltips) and whether it goes down too (``gauge``). Adding a counter is a line here plus
    the code that increments it; ``tests/unit/test_formats.py`` fails on a name a Lua script
    increments that is neither a member nor in a family."""

    _value_: str
    group: Group
    shown: Shown
    help: str
    gauge: bool

    def __new__(
        cls, value: str, group: Group, shown: Shown, help: str, gauge: bool = False
    ) -> Counter:
        member = str.__new__(cls, value)
        member._value_ = value
        member.group = group
        member.shown = shown
        member.help = help
        member.gauge = gauge
        return member

    DISCOVERED = "discovered", F, Shown.EARLY, "links found in fetched pages (duplicates too)"
    ADMITTED = "admitted", F, Shown.EARLY, "URLs admitted to the frontier"
    DEDUPLICATED = "deduplicated", F, Shown.EARLY, "links dropped as already seen"
    QUEUED = "queued", F, Shown.EARLY, "URLs waiting in the frontier", True
    REPLAYED = "replayed", F, Shown.NO, "failed URLs put back by retry_failed"
    DONE = "done", P, Shown.LATE, "URLs that reached a final state"
    FETCHED = "fetched", P, Shown.LATE, "URLs fetched (any HTTP status)"
    PARSED = "parsed", P, Shown.LATE, "HTML pages parsed"
    FAILED = "failed", P, Shown.LATE, "URLs that failed for good"
    BYTES = "bytes", P, Shown.LATE, "bytes of response bodies fetched"
    ROBOTS_DISALLOWED = (
        "robots_disallowed",
        N,
        Shown.LATE,
        "URLs not fetched: disallowed by robots.txt",
    )
    ROBOTS_UNREACHABLE = (
        "robots_unreachable",
        N,
        Shown.LATE,
        "URLs not fetched: robots.txt unreachable",
    )
    CANCELLED = "cancelled", N, Shown.LATE, "URLs dropped unfetched by a cancel"
    RENDERED = "rendered", R, Shown.LATE, "pages rendered by a browser (render option)"
    SUBREQUESTS = "subrequests", R, Shown.NO, "browser subrequests made"
    SUBREQUESTS_BLOCKED = (
        "subrequests_blocked",
        R,
        Shown.NO,
        "browser subrequests refused by the SSRF guard",
    )
    SUBREQUESTS_REFUSED = (
        "subrequests_refused", R, Shown.NO,
        "browser subrequests refused otherwise (robots.txt, caps, blocked types, methods)",
    )  # fmt: skip
    ITEMS = "items", E, Shown.LATE, "items returned by the crawl's extraction hook"
    EXTRACT_ERRORS = (
        "extract_errors",
        E,
        Shown.LATE,
        "pages whose extraction hook (or on_item send) failed",
    )
    NEAR_DUPLICATES = (
        "near_duplicates",
        E,
        Shown.NO,
        "pages found near-duplicates of another (duplicate_of)",
    )
    SITEMAP_FILES = "sitemap_files", S, Shown.NO, "sitemap files admitted (capped)"
    SITEMAPS = "sitemaps", S, Shown.NO, "sitemap files fetched and used"
    # A schedule's runs: pages a previous run had seen, fetched again (a 304, or a 2xx found
    # changed or unchanged), and those found changed; pages an adaptive schedule left for
    # later; revisit records written instead of a response, and the bytes they did not store.
    REVISITS = "revisits", RC, Shown.LATE, "pages a previous run had seen, fetched again"
    REVISITS_CHANGED = "revisits_changed", RC, Shown.LATE, "revisited pages found changed"
    NOT_DUE = "not_due", RC, Shown.LATE, "pages not fetched as not due (adaptive schedules)"
    REVISIT_RECORDS = "revisit_records", RC, Shown.LATE, "WARC revisits written, not responses"
    REVISIT_BYTES_SAVED = "revisit_bytes_saved", RC, Shown.LATE, "payload bytes not stored again"

    @classmethod
    def shown_in(cls, where: Shown) -> tuple[Counter, ...]:
        """The counters progress() shows at ``where``, in order."""
        return tuple(c for c in cls if c.shown is where)


class Status(Word):
    """A crawl's ``status`` (its state hash). finishing.lua writes FINISHING and the final
    one; ``tests/integration/test_formats.py`` runs it against these values."""

    RUNNING = "running"
    PAUSED = "paused"
    FINISHING = "finishing"  # drained; its finisher writes summary.json, then the final status
    FINISHED = "finished"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # never stored: what a crawl without a state hash shows

    @property
    def final(self) -> bool:
        return self in (Status.FINISHED, Status.CANCELLED)


class Steering(Word):
    """What the dispatcher does with a crawl; release.lua gets it as its last argument."""

    RUN = "run"
    PAUSED = "paused"
    CANCELLED = "cancelled"  # drain the frontier unfetched
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


def status_code(code: int) -> str:
    return f"status:{code}"


def failed(reason: str) -> str:
    return f"failed:{reason}"


def skipped(reason: str) -> str:
    return f"skipped:{reason}"


def change(kind: str) -> str:
    return f"change:{kind}"


def links_dropped(reason: str) -> str:
    return f"links_dropped:{reason}"


#: The crawl state's field naming its first TLS failure, shown by ``status`` and the summary.
TLS_NOTE = "tls_error_why"

#: Counter families: prefix -> summary.json section.
FAMILIES = {
    "status": "status_codes",
    "failed": "failures",
    "skipped": "skipped",
    "change": "changes",
}
#: Every counter family's prefix, also those summary.json leaves out (links_dropped).
FAMILY_PREFIXES = frozenset({*FAMILIES, "links_dropped"})


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
        """What :meth:`dumps` begins with, up to the record: commit.lua compares it instead of
        decoding the whole record (KBs of outlinks); every stored entry is dumps()'s."""
        value = {"rid": self.rid, "path": self.path, "ts": self.ts}
        return json.dumps(value, **_COMPACT)[:-1] + ',"record":'

    def fence(self) -> str:
        """claim.lua's fence of the earlier writers, which commit.lua compares: the file AND time
        (a claimer may write to the very file of the writer it fences: its own slow thread)."""
        return f"{self.path}|{self.ts!r}"

    @classmethod
    def loads(cls, raw: str | bytes) -> Unwritten:
        v = json.loads(raw)
        return cls(v["rid"], v["path"], float(v["ts"]), v["record"])


class ArchiveSlot(NamedTuple):  # a WARC writer's reservation (CrawlKeys.archived), as JSON
    rid: str  # the WARC-Record-ID of the URL's records
    path: str  # the writer's WARC file
    at: int  # its size before the append (grown past it: the records are there)


class ArchivePlace(int, Enum):
    """archive_reserve.lua's first reply: what a WARC writer does (state/archive.py)."""

    ARCHIVED = 0  # the URL's records are archived already: write none (their id follows)
    WRITE = 1  # the place is this writer's now
    PENDING = 2  # another writer reserved it and did not commit yet (its slot follows)
