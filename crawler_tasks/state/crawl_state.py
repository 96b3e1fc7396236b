"""A crawl's state hash (``P:{C}:state``, state/keys.py) read into one typed value: its status
and steering flags, its times, and the notes workers leave on it (the first TLS failure, why
robots.txt was unreachable, where summary.json went...). Every field the hash may hold is a
field here, and the notes a worker writes are named by :class:`Note`; nothing outside
``state/`` reads the hash by field name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .formats import TLS_NOTE, Status, Word


class Note(Word):
    """Notes a worker leaves on the crawl's state hash (``CrawlLifecycle.note`` and
    ``first_note``: the first one kept, ``first``: something done once per crawl)."""

    #: "ORIGIN: tls_error: why", the first TLS failure (the summary's hint of a missing CA).
    TLS_ERROR_WHY = TLS_NOTE
    #: "ORIGIN: why", the first robots.txt that could not be read.
    ROBOTS_UNREACHABLE_WHY = "robots_unreachable_why"
    #: Why a cancelled crawl's unwritten records were given up (its disk refused them).
    OUTPUT_GIVEN_UP = "output_given_up"
    #: Where the finisher wrote summary.json (on that worker's host).
    SUMMARY_PATH = "summary_path"
    #: The host of that worker (the command asking where the files are may run elsewhere).
    SUMMARY_HOST = "summary_host"
    #: The crawl's on_finished task was sent (once).
    ON_FINISHED_SENT = "on_finished_sent"
    #: A recrawl's vanished URLs were counted (once).
    GONE_COUNTED = "gone_counted"


@dataclass(frozen=True)
class CrawlState:
    """The state hash, typed. A crawl that is not there reads as status ``unknown``."""

    status: Status = Status.UNKNOWN
    #: Unix seconds; finished_at is set when the crawl is drained (finishing.lua).
    started_at: float = 0.0
    finished_at: float | None = None
    paused: bool = False
    cancelled: bool = False
    #: The status a finishing crawl will have (finishing.lua).
    final_status: Status | None = None
    #: Why the crawl was stopped (an extraction hook no worker can import).
    error: str | None = None
    #: What keeps its output from being written ("disk full at DIR"), and until when (unix
    #: seconds) releases pause for it (CrawlLifecycle.output_failed).
    output_problem: str | None = None
    output_blocked_until: float = 0.0
    #: URLs of max_pages reserved by admissions so far (reserve.lua).
    reserved: int = 0
    tls_error_why: str | None = None
    robots_unreachable_why: str | None = None
    output_given_up: str | None = None
    summary_path: str | None = None
    summary_host: str | None = None
    on_finished_sent: bool = False
    gone_counted: bool = False

    @classmethod
    def from_hash(cls, raw: dict[bytes, bytes]) -> CrawlState:
        got = {k.decode(): v.decode() for k, v in raw.items()}
        text = {f.name: got.get(f.name) for f in dataclasses.fields(cls)}
        return cls(
            status=Status(text["status"]) if text["status"] else Status.UNKNOWN,
            started_at=float(text["started_at"] or 0),
            finished_at=float(text["finished_at"]) if text["finished_at"] else None,
            paused=text["paused"] == "1",
            cancelled=text["cancelled"] == "1",
            final_status=Status(text["final_status"]) if text["final_status"] else None,
            error=text["error"],
            output_problem=text["output_problem"],
            output_blocked_until=float(text["output_blocked_until"] or 0),
            reserved=int(text["reserved"] or 0),
            tls_error_why=text["tls_error_why"],
            robots_unreachable_why=text["robots_unreachable_why"],
            output_given_up=text["output_given_up"],
            summary_path=text["summary_path"],
            summary_host=text["summary_host"],
            on_finished_sent=bool(text["on_finished_sent"]),
            gone_counted=bool(text["gone_counted"]),
        )


#: Every field the state hash may hold (tests/integration/test_formats.py checks a crawl's
#: against it).
FIELDS = frozenset(f.name for f in dataclasses.fields(CrawlState))
