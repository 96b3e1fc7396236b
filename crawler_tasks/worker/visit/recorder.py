"""The last step of every URL: record its final state exactly once, and finish the crawl
when it was the last one.

    finalize:  finish.lua (counted once; the record kept in Redis as "unwritten")
               -> record on disk (edges, then the page line with its record id)
               -> commit.lua: unwritten entry deleted (or the copy undone, see below), sent
                  with the next page's finish.lua (page_appends.py)
               -> event -> the crawl's finisher if it was the last

A process that dies between finish.lua and the delete leaves the record in Redis. Whoever
meets it next writes it, unless the page line with its record id is already in the dead
writer's file (same host): the redelivered task (start.lua says so), the dispatcher's sweep,
or the finisher, which writes every orphan before ``summary.json``; of several that meet it
at once, the one that claims it in Redis (claim.lua). A writer that was frozen meanwhile
(SIGSTOP, a paused VM) may wake up anywhere, even in the middle of its append: so every copy
is asked about after its append, with nothing appended to the file before the answer, whether
it counts (commit.lua: the claim fenced it), and truncated back if it was taken over. Only a process that
dies (not freezes) between its append and that question, on another host than the one that
writes the record again (which cannot read its file), can leave a URL with two lines.

:func:`crawl_finished` (the finisher) is a sequence of idempotent steps under a lock:
orphans, recrawl ``gone`` count, ``summary.json``, key expiry, the ``crawl_finished`` event,
the owner's ``on_finished`` task, and only then the final status. A process that dies in it
leaves the crawl "finishing"; the dispatcher (or the redelivered task) runs it again.

A disk that is full or fails (:class:`~crawler_tasks.errors.OutputUnavailable`) is an
environment fault, not a URL's: the record stays in Redis as unwritten (the dispatchers' sweep
writes it once there is room), the crawl's releases pause and ``status`` says why; the
finisher waits for room too, and gives up the files it cannot write only when the crawl is
cancelled.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from ...errors import OutputUnavailable
from ...state import events, formats, objects
from ...state.admission import RedirectClaims
from ...state.crawl_state import Note
from ...state.formats import Counter, Status
from ...state.scripts import Call
from ...state.store import CrawlStore
from ...state.summary import Summary
from ...state.workers import alive
from ..output.appends import describe
from ..output.files import ITEMS, items_path, page_text, write_summary
from ..output.segments import copies
from ..output.warc import uuid4_hex
from ..process import faults
from ..process.logs import Throttled
from ..runtime.context import Context
from .outcome import Final
from .trip import Visit

log = logging.getLogger(__name__)
_unwritable = Throttled(log, "writing crawl output", every=30.0)

DEAD_LETTER_FIELDS = (
    "url",
    "depth",
    "error",
    "status",
    "detail",
    "attempts",
    "fetched_at",
    "extract_error",
)


def finalize(visit: Visit, final: Final, before: Callable[[], Call] | None = None) -> str:
    """Record the visit's URL's final state once; the call that empties the crawl finishes it.
    ``before``: a script call to send with finish.lua, first (the lease's, settle.py)."""
    store = visit.store
    assert final.url == visit.url, (final.url, visit.url)
    counters = {**final.counters, Counter.DONE.value: 1}
    record = final.record()
    failed = Counter.FAILED.value in counters
    if failed or record.get("extract_error"):
        # Before finish: a dead letter for a URL that then turns out final already is harmless.
        store.dead_letters.add(final.url, {k: record.get(k) for k in DEAD_LETTER_FIELDS})
    if final.recorded:  # finish.lua, then its line on disk
        left, kept = _finish_and_append(visit, record, counters, before and before())
    else:  # counted, no line in the output
        left, kept = store.ledger.finish(final.url, None, counters, before and before()), None
    if left < 0:  # final already; its record may still be waiting for a writer
        waiting = final.recorded and store.unwritten.get(final.url)
        return recover(visit) if waiting else "duplicate"
    if final.extra.get("redirects") and not failed:
        RedirectClaims.release(store.client, store.ck, final.url)
    # A process frozen since finish.lua (SIGSTOP, a VM pause) may find its record written by
    # another (the sweep, the finisher): its copy is undone (commit.lua), not kept twice.
    if kept is not None and kept():
        faults.point("after_record")  # else: written elsewhere, or waiting in Redis for room
    if final.recorded:
        kind = "request_failed" if final.error else "request_completed"
        payload = {k: record[k] for k in ("url", "status", "error", "depth")}
        events.emit(store.client, store.ck, kind, store.id, record=payload)
    if left == 0 and store.lifecycle.finishing():  # its partition emptied: is it drained?
        crawl_finished(visit.ctx, store)
    return final.error or "done"


def _finish_and_append(
    visit: Visit, record: dict[str, Any], counters: dict[str, int], after: Call | None
) -> tuple[int, Callable[[], bool] | None]:
    """finish.lua carrying the last page append's commit (page_appends.py), then the append of
    ``record`` (its id given here), the pages files held from one to the other: finish's
    answer, and the wait for the append's commit, True if the copy counts (None: not
    appended, see :func:`write_record`)."""
    ctx, store, runtime, url = visit.ctx, visit.store, visit.runtime, visit.url
    out = runtime.output()
    record["rid"] = uuid4_hex()
    text = None if ITEMS in record else page_text(record)  # encoded once, for both
    entry = formats.Unwritten(record["rid"], str(out.pages_path), time.time(), record, text)
    writes, unavailable = out.page_writes(record, text=text), None
    with out.pages.lock:
        last = out.pages.take()
        try:
            carry = last.call if last is not None else None
            reply, left = store.ledger.finish_carrying(carry, url, entry, counters, after)
        except Exception:
            out.pages.unsettled = last  # asked again, by the next writer or its own
            raise
        if last is not None:
            out.pages.settle(last, reply)
        if isinstance(left, Exception):
            raise left
        if left < 0:
            return left, None
        faults.point("after_finish")
        try:
            mine = out.final_carried(writes, store.unwritten.commit_call(url, entry), store.client)
        except OutputUnavailable as exc:
            mine, unavailable = None, exc
    if unavailable is not None:
        output_failed(ctx, store, unavailable)
    elif runtime.output_failing:
        _output_ok(ctx, store)
    return left, None if mine is None else partial(out.pages.wait, mine)


def _committer(store: CrawlStore, url: str, entry: formats.Unwritten) -> Callable[[], bool]:
    """Asked by the output right after it appended ``entry``'s record: keep it? (commit.lua
    marks it written when it is still this writer's.)"""
    return lambda: store.unwritten.commit(url, entry) is not formats.Committed.MOVED


def write_record(
    ctx: Context,
    store: CrawlStore,
    record: dict[str, Any],
    *,
    with_items: bool = True,
    commit: Callable[[], bool] | None = None,
) -> bool:
    """``record`` on disk; False if it was not written: the output cannot be written now (the
    crawl told, see :func:`output_failed`; the record waits in Redis as unwritten), or
    ``commit`` says another process took it over meanwhile (the append is undone)."""
    runtime = ctx.crawl_runtime(store)
    try:
        if not runtime.output().final(record, with_items=with_items, commit=commit):
            return False
    except OutputUnavailable as exc:
        output_failed(ctx, store, exc)
        return False
    if runtime.output_failing:
        _output_ok(ctx, store)
    return True


def _output_ok(ctx: Context, store: CrawlStore) -> None:
    """Room again: the crawl may release URLs again."""
    ctx.crawl_runtime(store).output_failing = False
    store.lifecycle.output_ok()


def output_failed(ctx: Context, store: CrawlStore, exc: OutputUnavailable) -> None:
    """Writing failed for a reason of the disk: pause the crawl's releases and say why."""
    ctx.crawl_runtime(store).output_failing = True
    store.lifecycle.output_failed(str(exc))
    _unwritable.failed(exc, expected=True)


def write_orphan(
    ctx: Context, store: CrawlStore, url: str, entry: formats.Unwritten, strict: bool = False
) -> bool:
    """Put an unwritten record on disk unless its writer got it there; True if written now.
    Its redelivered task, the dispatcher's sweep and the finisher can meet one orphan at once:
    the one that claims it (claim.lua) writes it. The entry then names this process's file and
    time, with the items only if they are still to write, for whoever meets it next."""
    if _on_disk(entry, output=store.opts.output):
        store.unwritten.written(url)
        return False
    # Items go first: if they made it and the page line did not, they are not repeated.
    items = bool(entry.record.get(ITEMS))
    with_items = items and not _on_disk(entry, items_path(Path(entry.path)), store.opts.output)
    runtime = ctx.crawl_runtime(store)
    out = runtime.output()
    record = {k: v for k, v in entry.record.items() if with_items or k != ITEMS}
    mine = formats.Unwritten(entry.rid, str(out.pages_path), time.time(), record)
    if not store.unwritten.claim(url, entry, mine):
        return False  # written, or claimed by another process, since it was read
    if not write_record(
        ctx, store, record, with_items=with_items, commit=_committer(store, url, mine)
    ):
        if strict and runtime.output_failing:  # the finisher cannot go on without it
            raise _unavailable(ctx, store)
        return False
    _say_written(ctx, store, url, entry)
    return True


def _say_written(ctx: Context, store: CrawlStore, url: str, entry: formats.Unwritten) -> None:
    """Why someone else wrote the record: its writer died, or it is alive and its output
    refused the record (a full disk); the writer is named by its pages file
    (``pages-<worker id>.jsonl``)."""
    writer = Path(entry.path).name.removeprefix("pages-").removesuffix(".jsonl")
    if writer in alive(store.client, ctx.keys, ctx.settings.worker_dead_seconds):
        why = f"that {writer} could not write (its output refused it)"
    else:
        why = "left by a dead process"
    log.warning("crawl %s: wrote the record of %.300s %s", store.id, url, why)


def recover(visit: Visit) -> str:
    """A task met its URL final with its record unwritten (start.lua returned 2)."""
    ctx, store = visit.ctx, visit.store
    entry = store.unwritten.get(visit.url)
    if entry is not None:
        write_orphan(ctx, store, visit.url, entry)
    if store.lifecycle.finishing():  # its finisher may have died too
        crawl_finished(ctx, store)
    return "recovered"


def _on_disk(entry: formats.Unwritten, path: Path | None = None, output: str = "") -> bool:
    """Is the page line of ``entry`` (or its first item line) in its writer's file? Read only
    when the file is on this host (its name carries the writer's host); elsewhere it cannot
    be known here. An s3:// crawl's (``output``): in any segment of that writer, staged here
    or already in the store, which every host can read."""
    path = path or Path(entry.path)
    needle = f'"rid":"{entry.rid}"'.encode()
    if objects.is_url(output):
        store = objects.store_for(output).child(path.parent.name)
        return any(needle in data for data in copies(path, store))
    if f"-{socket.gethostname()}-" not in path.name or not path.exists():
        return False
    with path.open("rb") as f:
        return any(needle in line for line in f)


def sweep_orphans(ctx: Context, store: CrawlStore) -> int:
    """Write the records whose writer died (older than ``orphan_record_seconds``)."""
    old, _young = store.unwritten.orphans(ctx.settings.orphan_record_seconds)
    return sum(write_orphan(ctx, store, url, entry) for url, entry in old)


def crawl_finished(ctx: Context, store: CrawlStore) -> bool:
    """The end of a crawl, once; False if another process is running it (or it is done), or
    if its output cannot be written now (it stays finishing, status says why, and a
    dispatcher tries again once the pause is over)."""
    opts, status, finisher = store.opts, store.lifecycle, store.finisher
    if not _finisher_lock(ctx, store):
        return False
    state = status.read()
    if state.status is not Status.FINISHING:
        finisher.unlock()
        return False
    final = state.final_status or Status.FINISHED
    try:
        summary = _files_of_the_end(ctx, store, final)
    except OutputUnavailable as exc:
        if not status.read().cancelled:
            output_failed(ctx, store, exc)
            finisher.unlock()
            log.warning("crawl %s: finishing waits for its output: %s", opts.crawl_id, exc)
            return False
        # Cancelled while its output cannot be written: what is not on disk is given up.
        final = Status.CANCELLED
        status.note(Note.OUTPUT_GIVEN_UP, str(exc))
        summary = replace(store.stats.summary(), status=final)
    finisher.expire(ctx.settings.finished_ttl)
    store.frontier.tails.clear()  # no chunk is read again: a cancel dropped their indexes
    told = summary.to_json()
    events.emit(store.client, store.ck, "crawl_finished", opts.crawl_id, summary=told)
    if opts.on_finished and not state.on_finished_sent:
        ctx.on_finished(opts.on_finished, opts.crawl_id, told)
        status.note(Note.ON_FINISHED_SENT)
    # The series' last point: the crawl's end, whatever the interval (state/series.py).
    store.series.sample(now=summary.finished_at or None, force=True)
    finisher.finished(final)
    log.info("crawl %s %s in %.1fs", opts.crawl_id, final, summary.duration_s)
    return True


def _files_of_the_end(ctx: Context, store: CrawlStore, final: Status) -> Summary:
    """Every record on disk, then ``summary.json``; OutputUnavailable if the disk refuses."""
    opts, status = store.opts, store.lifecycle
    _write_all_orphans(ctx, store)
    if store.recrawl is not None and status.first(Note.GONE_COUNTED):
        store.stats.put(formats.change("gone"), store.recrawl.gone())
    summary = replace(store.stats.summary(), status=final)
    directory = f"{objects.local_root(opts.output, ctx.settings.output_dir)}/{opts.crawl_id}"
    try:
        written = write_summary(directory, summary.to_json())
    except OSError as exc:
        raise OutputUnavailable(directory, describe(exc)) from exc
    path = str(written)
    if objects.is_url(opts.output):  # beside the segments; StoreUnavailable: tried again
        objects.store_for(opts.output).child(opts.crawl_id).put(
            "summary.json", written.read_bytes()
        )
        written.unlink(missing_ok=True)  # staged no longer: the store's is the one
        path = f"{opts.output}/{opts.crawl_id}/summary.json"
    faults.point("after_summary")
    # The host too: the command asking where the files are may run elsewhere (surface/export.py).
    status.note(Note.SUMMARY_PATH, path)
    status.note(Note.SUMMARY_HOST, socket.gethostname())
    return summary


def _unavailable(ctx: Context, store: CrawlStore) -> OutputUnavailable:
    """The crawl's output problem as noted (``output_failed``), as an exception."""
    directory = str(ctx.crawl_runtime(store).output().dir)
    problem = store.lifecycle.output_problem() or "cannot be written"
    return OutputUnavailable(directory, problem.removesuffix(f" at {directory}"))


def _finisher_lock(ctx: Context, store: CrawlStore) -> bool:
    """One finisher at a time; the lock of a finisher that stopped beating is taken over."""
    lock_s = int(ctx.settings.orphan_record_seconds * 2 + 60)
    if store.finisher.lock(ctx.worker_id, lock_s):
        return True
    holder = store.finisher.holder()
    if holder is None or holder in alive(store.client, ctx.keys, ctx.settings.worker_dead_seconds):
        return False
    log.warning("crawl %s: the finisher %s died; finishing it here", store.id, holder)
    store.finisher.take(ctx.worker_id, lock_s)
    return True


def _write_all_orphans(ctx: Context, store: CrawlStore) -> None:
    """Every record on disk before the summary: orphans at once, records of live writers (or
    of processes that just claimed an orphan) once ``orphan_record_seconds`` old, if they did
    not write them meanwhile. Returns when none is left."""
    wait = ctx.settings.orphan_record_seconds
    while True:
        old, young = store.unwritten.orphans(wait)
        for url, entry in old:
            write_orphan(ctx, store, url, entry, strict=True)
        if not old and not young:
            return
        if young and store.lifecycle.output_problem():
            raise _unavailable(ctx, store)  # their writers failed for the disk: no use waiting
        time.sleep(0.05)
