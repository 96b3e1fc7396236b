"""The figures users read, typed (state/figures.py, state/watch_figures.py, state/summary.py): their one JSON form (the keys users read in
``crawler status --json``, ``summary.json`` and ``Crawl.progress()`` stay), what they derive
once (final, the share done, the ETA, the pace), a summary read back from its file, and that
nothing outside the type reads a figure by its key name (the page's script included)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from crawler_tasks.state.crawl_state import CrawlState
from crawler_tasks.state.figures import RATE_WINDOW, Families, Listed, Live, Progress
from crawler_tasks.state.formats import Counter, Group, Shown, Status
from crawler_tasks.state.health import Memory
from crawler_tasks.state.summary import Notes, Summary
from crawler_tasks.state.watch_figures import Detail, HostDown, Outlook

PACKAGE = Path(__file__).resolve().parents[2] / "crawler_tasks"


def progress_of(counts: dict[str, int], status: Status = Status.RUNNING, **kw: Any) -> Progress:
    """A Progress of ``counts`` (Live figures by name in ``kw``, the rest Progress fields)."""
    live = {f.value: kw.pop(f.value) for f in Live if f.value in kw}
    state = CrawlState(status=status, started_at=1000.0, paused=kw.pop("paused", False))
    fields: dict[str, Any] = {"elapsed": 20.0, "recent_rate": 2.0, "max_pages": 0, "output": None}
    return Progress("c", state, counts, live, **{**fields, **kw})


def outlook(memory: Memory | None = None) -> Outlook:
    down = (HostDown("b.test", 10.0, 3.0),)
    return Outlook((("a.test", 4), ("b.test", 1)), down, memory, 0.9, {"a.test": {"mode": "raw"}})


#: The keys of ``Crawl.progress()`` and ``crawler status --json`` before the figures were
#: typed (the JSON form keeps every one: users read them).
OLD_PROGRESS = [
    "crawl_id", "status", "paused", "discovered", "admitted", "deduplicated", "queued",
    "retrying", "in_flight", "outstanding", "done", "fetched", "parsed", "failed", "bytes",
    "robots_disallowed", "robots_unreachable", "cancelled", "rendered", "items",
    "extract_errors", "revisits", "revisits_changed", "not_due", "revisit_records",
    "revisit_bytes_saved", "elapsed_s", "pages_per_s", "recent_pages_per_s", "output",
    "error", "tls_error_why", "eta_s", "backlog", "hosts_down", "summary_path", "redis_oom",
    "admission_paused", "redis_memory", "render_hosts", "domains", "bloom", "on_item_waiting",
]  # fmt: skip
#: ... and of summary.json (crawler crawl --json: with the notes).
OLD_SUMMARY = [
    "crawl_id", "status", "started_at", "finished_at", "duration_s", "pages_per_s", "error",
    "robots_unreachable_why", "tls_error_why", "counters", "status_codes", "failures",
    "skipped", "changes",
]  # fmt: skip
NOTES = ["output_dir", "tls_hint", "first_extract_error", "first_failure"]


def test_the_json_forms_keep_every_key_users_read() -> None:
    counts = {"done": 5, "admitted": 10, "status:200": 4, "failed:timeout": 1}
    memory = Memory(used=50, maxmemory=100)
    detail = Detail(({"domain": "a.test"},), {"fill_ratio": 0.1}, on_item=True)
    p = progress_of(counts, outstanding=5, outlook=outlook(memory), detail=detail)
    form = p.to_json()
    added = ("final", "done_share", "shown_status", "pace", "summary_host")
    assert list(form) == [k for k in form if k in OLD_PROGRESS or k in added]
    assert set(form) == {*OLD_PROGRESS, *added}
    assert form["hosts_down"] == [{"domain": "b.test", "down_since": 10.0, "next_probe_s": 3.0}]
    assert form["redis_memory"] == {"used_bytes": 50, "maxmemory_bytes": 100}
    assert form["backlog"] == [("a.test", 4), ("b.test", 1)]
    # Without the sections a view did not read, their keys are not there (crawler list).
    assert set(progress_of(counts).to_json()) == set(form) - {
        "backlog", "hosts_down", "redis_oom", "admission_paused", "redis_memory",
        "render_hosts", "domains", "bloom", "on_item_waiting",
    }  # fmt: skip
    summary = Summary.of(p)
    assert list(summary.to_json()) == OLD_SUMMARY
    noted = replace(summary, notes=Notes(output_dir="/d", first_failure="x"))
    assert list(noted.to_json()) == [*OLD_SUMMARY, "output_dir", "first_failure"]
    listed = Listed("c", p, ("http://a.test/",), 1000.0, at=1010.0).to_json()
    assert set(listed) == {*form, "seeds", "started_at", "age_s"} and listed["age_s"] == 10.0


def test_a_summary_read_back_from_its_file_is_the_same() -> None:
    counts = {"done": 3, "fetched": 3, "status:404": 1, "status:200": 2, "change:new": 0}
    p = progress_of(counts, status=Status.FINISHED)
    summary = Summary.of(p)
    assert Summary.from_json(summary.to_json()) == summary
    assert summary.families.status_codes == {"200": 2, "404": 1}
    assert list(summary.families.status_codes) == ["200", "404"]
    assert summary.families.changes == {}  # a 0 retry_failed() left is dropped
    noted = replace(summary, notes=Notes(*[f"{n}!" for n in NOTES]))
    assert Summary.from_json(noted.to_json()) == noted
    # A file written before a figure was added reads with its default.
    old = {k: v for k, v in summary.to_json().items() if k != "robots_unreachable_why"}
    assert Summary.from_json(old).robots_unreachable_why is None


def test_what_a_view_used_to_derive_is_derived_once() -> None:
    counts = {"done": 30, "admitted": 40}
    p = progress_of(counts, outstanding=10)
    assert not p.final and p.done_share == 0.75 and p.pages_per_s == 1.5
    assert p.pace == p.recent_pages_per_s == 2.0 and p.eta_s == 5.0
    # max_pages bounds what is left; a paused or final crawl, or none moving, has no ETA.
    assert progress_of(counts, outstanding=10, max_pages=34).eta_s == 2.0
    assert progress_of(counts, outstanding=10, paused=True).eta_s is None
    assert progress_of(counts, outstanding=10, recent_rate=0.0).eta_s is None
    over = progress_of({**counts, "fetched": 30}, status=Status.CANCELLED, outstanding=10)
    # Being cancelled (still running while its frontier drains): no ETA (issue 50 item 5).
    cancelling = CrawlState(status=Status.RUNNING, started_at=1000.0, cancelled=True)
    assert replace(progress_of(counts, outstanding=10), state=cancelling).eta_s is None
    assert over.final and over.eta_s is None and over.pace == over.pages_per_s
    # Cancelling: URLs are counted, not fetched: no pace, no ETA, in every form (issue 50).
    settling = progress_of({**counts, "fetched": 30}, status=Status.CANCELLING, outstanding=10)
    assert (settling.pace, settling.eta_s, settling.final) == (None, None, False)
    form = settling.to_json()
    assert (form["status"], form["pages_per_s"], form["recent_pages_per_s"]) == (
        "cancelling",
        None,
        None,
    )
    assert "eta_s" not in form and form["pace"] is None
    # Over with nothing fetched (every URL failed): shown failed, without a pace.
    nothing = progress_of({"done": 1, "failed": 1, "admitted": 1}, status=Status.FINISHED)
    assert (nothing.shown_status, nothing.pace, nothing.to_json()["pages_per_s"]) == (
        "failed",
        None,
        None,
    )
    assert over.shown_status == "cancelled" and p.shown_status == "running"
    # A crawl younger than the rate's window: its rate over the seconds it has lived.
    young = progress_of(counts, elapsed=4.0, recent_rate=1.0)
    assert young.recent_pages_per_s == RATE_WINDOW / 4.0
    assert progress_of({}).done_share == 0.0
    assert progress_of({"fetched": 0, "failed": 2}).to_json()["final"] is False
    assert Summary.of(progress_of({"done": 2, "fetched": 0, "failed": 2})).failed
    assert not Summary.of(progress_of({"done": 3, "fetched": 1, "failed": 2})).failed
    # Every URL failed, one of them after its fetch (its render): failed all the same.
    assert Summary.of(progress_of({"done": 1, "fetched": 1, "failed": 1})).failed
    assert Summary.of(progress_of({"done": 2, "failed": 1, "robots_unreachable": 1})).failed
    assert not Summary.of(progress_of({"done": 1, "robots_disallowed": 1})).failed


def test_families_come_from_the_counter_names() -> None:
    fam = Families.of({"skipped:scope": 2, "failed:dns": 1, "links_dropped:cap": 9, "done": 1})
    assert fam == Families({}, {"dns": 1}, {"scope": 2}, {})


def test_progress_and_metrics_lists_come_from_counter() -> None:
    from crawler_tasks.state.figures import EARLY, LATE
    from crawler_tasks.surface.metrics import _COUNTERS, _GAUGES

    assert [c.value for c in EARLY] == ["discovered", "admitted", "deduplicated", "queued"]
    assert [c.value for c in LATE] == [
        "done", "fetched", "parsed", "failed", "bytes", "robots_disallowed",
        "robots_unreachable", "cancelled", "rendered", "items", "extract_errors",
        "revisits", "revisits_changed", "not_due", "revisit_records", "revisit_bytes_saved",
    ]  # fmt: skip
    assert set(_COUNTERS) == {c.value for c in Counter} - {"queued"}
    assert _GAUGES["queued"] == Counter.QUEUED.help


def test_every_view_takes_every_counter_from_its_declaration() -> None:
    """status text, the summary, the dashboard's counters and Prometheus name every counter
    (render ones included) with the group and help text declared with it, once; status shows
    the counters progress() shows (Counter.shown), the summary every one."""
    from rich.console import Console

    from crawler_tasks.state.summary import Summary
    from crawler_tasks.surface.display import line, table
    from crawler_tasks.surface.metrics import _COUNTERS, _GAUGES
    from crawler_tasks.surface.summary import summary_text

    values = {c.value: n for n, c in enumerate(Counter, start=1)}
    progress = progress_of(values, retrying=7)
    rows = [r.to_json() for r in progress.rows(every=True)]
    assert {r["name"] for r in rows} == set(values) | {f.value for f in Live}
    assert all(r["help"] and r["group"] for r in rows)
    assert {r["name"]: r["help"] for r in rows} == {**_COUNTERS, **_GAUGES}
    groups = [r["group"] for r in rows]
    assert groups == sorted(groups, key=[g.value for g in Group].index)
    console = Console(width=400, record=True)
    console.print(table(progress))
    summary = Summary.of(progress)
    for text in (line(progress), console.export_text(), summary_text(summary)):
        for c in Counter:  # a name whole: "revisits" is not found in "revisits_changed"
            shown = c.shown is not Shown.NO or text == summary_text(summary)
            assert bool(re.search(rf"\b{c}\b", text)) is shown, (c, text)
        assert "render" in text and "rendered" in text
    assert Counter("done") is Counter.DONE and f"{Counter.DONE}" == "done"


# --- nothing reads a figure by its key name -------------------------------------------------
def figure_keys() -> set[str]:
    """Every top-level key of the JSON forms (counters and live figures included)."""
    detail = Detail((), {}, on_item=True)
    p = progress_of({c.value: 1 for c in Counter}, outlook=outlook(), detail=detail)
    noted = replace(Summary.of(p), notes=Notes(*NOTES))
    listed = Listed("c", p, (), 0.0)
    return {*p.to_json(), *noted.to_json(), *listed.to_json(), "unreadable"}


#: Where figures are read: every view (surface/), the modules that build them and the worker
#: that writes summary.json. (Elsewhere in state/ and worker/ the same words name other
#: records: a page record's "status", a crawl state hash's "error".)
READERS = [
    *sorted((PACKAGE / "surface").rglob("*.py")),
    *(PACKAGE / "state" / name for name in ("stats.py", "outlook.py", "store.py")),
    PACKAGE / "worker" / "visit" / "recorder.py",
]
#: Records of other parts that share a key name with a figure, read where they are handled:
#: (module, what holds one).
OTHER_RECORDS = {
    ("surface/crawl_run.py", "first"),  # a dead letter (state/ledger.py): url, error, detail
    ("surface/crawl_run.py", "f"),
    ("surface/figures.py", "record"),
    ("surface/wacz.py", "record"),  # a page record (pages-*.jsonl): fetched has a status
    ("surface/commands.py", "d"),  # a host's row (state/politeness.py): pending, in_flight
    ("surface/crawl_command.py", "ctx.params"),  # the command line's parameters
    ("surface/schedule_command.py", "entry"),  # a schedule (state/schedules.py): its seeds
}


def literal_reads(path: Path, keys: set[str], root: Path = PACKAGE) -> list[str]:
    """``x["key"]``, ``x.get("key")`` and ``"key" in x`` for a key of ``keys``."""
    rel = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        key, holder = None, None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key, holder = node.slice.value, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key, holder = node.args[0].value, node.func.value
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.ops[0], ast.In | ast.NotIn)
        ):
            key, holder = node.left.value, node.comparators[0]
        if not isinstance(key, str) or key not in keys:
            continue
        if (rel, ast.unparse(holder)) not in OTHER_RECORDS:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_figure_is_read_by_its_key_name_outside_its_type() -> None:
    keys = figure_keys()
    found = [hit for path in READERS for hit in literal_reads(path, keys)]
    assert not found, "read a figure as a typed attribute (state/figures.py):\n" + "\n".join(found)


def test_the_read_check_finds_a_literal_read(tmp_path: Path) -> None:
    """The rule above is not vacuous: each form of a read by name is found."""
    module = tmp_path / "surface" / "probe.py"
    module.parent.mkdir()
    module.write_text('p["done"]\np.get("eta_s")\n"backlog" in p\np["domain"]\n', "utf-8")
    found = literal_reads(module, figure_keys(), tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == ["p['done']", "p.get('eta_s')", "'backlog' in p"]


def test_the_dashboard_page_derives_no_figure() -> None:
    """The page's script names no final status and computes no share: the API sends
    ``final``, ``done_share``, ``controls`` and the admission line (it re-derived "final"
    three times)."""
    script = (PACKAGE / "surface" / "dashboard_static" / "dashboard.js").read_text("utf-8")
    for status in (Status.FINISHED, Status.CANCELLED):
        assert f'"{status}"' not in script
    assert "done / " not in script and "maxmemory_bytes *" not in script


def test_shown_counters_are_the_early_and_late_ones() -> None:
    shown = [r.figure for r in progress_of({}).rows()]
    assert set(shown) == {c for c in Counter if c.shown is not Shown.NO} | set(Live)
    assert {r.figure for r in progress_of({}).rows(every=True)} == {*Counter, *Live}
