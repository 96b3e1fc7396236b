"""The counters of a crawl's stats hash (``CrawlKeys.stats``), declared once.

A counter's name is a :class:`Counter` member or one of the families built by
:func:`status_code`, :func:`failed`, :func:`skipped`, :func:`change` and :func:`links_dropped`
(``failed:timeout``). Each member declares its name, its group, where ``progress()`` shows it
and its help text; ``crawler status``, the summary, the dashboard and Prometheus all read them
from here (state/figures.py). A new counter is one member here plus the code that increments
it: ``tests/unit/test_formats.py`` fails on a name a Lua script increments that is neither a
member nor in a family.
"""

from __future__ import annotations

from enum import Enum

from .word import Word


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
F = Group.FRONTIER
P = Group.PAGES
N = Group.NOT_FETCHED
R = Group.RENDER
E = Group.EXTRACTION
S = Group.SITEMAPS
RC = Group.RECRAWL


class Counter(Word):
    """Counters of a crawl's stats hash (``summary.json``'s ``counters``): the one
    declaration every view of them reads (names, groups, help text).

    Each member says its :class:`Group`, where ``progress()`` shows it (:class:`Shown`;
    progress keeps the order of declaration), its help text (Prometheus, the dashboard's
    tooltips) and whether it goes down too (``gauge``). Adding a counter is a member here plus
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
    CHUNKS_WRITTEN = (
        "chunks_written",
        F,
        Shown.NO,
        "chunks of spilled URLs written to the chunk store and indexed (flush.lua)",
    )
    CHUNKS_REFILLED = (
        "chunks_refilled",
        F,
        Shown.NO,
        "chunks moved from the chunk store into their hosts' heads (refill.lua)",
    )
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
        "subrequests_refused",
        R,
        Shown.NO,
        "browser subrequests refused otherwise (robots.txt, caps, blocked types, methods)",
    )
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


# --- counter families (``status:404``, ``failed:timeout``...) --------------------------------
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


#: Counter families: prefix -> summary.json section.
FAMILIES = {
    "status": "status_codes",
    "failed": "failures",
    "skipped": "skipped",
    "change": "changes",
}
#: Every counter family's prefix, also those summary.json leaves out (links_dropped).
FAMILY_PREFIXES = frozenset({*FAMILIES, "links_dropped"})
