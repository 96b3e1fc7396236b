"""Live crawl progress for a person: a rich display on a terminal, plain periodic lines when
stdout is a pipe or a file (CI logs, ``| tee``)."""

from __future__ import annotations

import sys
import time
from typing import IO

from rich.console import Console
from rich.live import Live as LiveDisplay
from rich.table import Table

from ..state.figures import Live, Progress, Row
from ..state.formats import Counter
from ..state.health import admission_paused
from .crawl import Crawl


def paused(p: Progress) -> str:
    """What holds the crawl back, to append to a status line: its output cannot be written
    (``output: disk full at DIR``), or Redis is nearly full (``admission paused: Redis out of
    memory (used X of maxmemory Y)``); "" when nothing does."""
    state, outlook = p.state, p.outlook
    text = f" — error: {state.error}" if state.error else ""
    if p.output:
        text += f" — output: {p.output} (writing paused; resumes when there is room)"
    for d in outlook.hosts_down if outlook else ():
        down_for = time.time() - d.down_since
        text += f" — {d.domain} down {down_for:.0f}s, next probe in {d.next_probe_s:.0f}s"
    if state.tls_error_why:  # every page of that host fails so: a CA the workers lack?
        text += f" — {state.tls_error_why}"
    text += render_note(p)
    if outlook and outlook.uploads and outlook.uploads.waiting:
        text += " — " + outlook.uploads.line()
    if outlook and outlook.admission_paused and outlook.memory:
        text += " — " + admission_paused(outlook.memory)
    return text


def render_note(p: Progress) -> str:
    """``render=auto``'s decisions: " — render: host render (5/12 rendered, 4 added)": of the
    host's 12 fetched pages with a script (render_plan.lua's ``pages``), 5 rendered and
    compared (``renders``: each URL once, a redelivered render is not counted again, so never
    more than the pages), 4 of which added links or text."""
    hosts = p.outlook.render_hosts if p.outlook else {}
    parts = [
        f"{h} {v.get('mode', '?')} ({v.get('renders', 0)}/{v.get('pages', 0)} rendered, "
        f"{v.get('gains', 0)} added)"
        for h, v in sorted(hosts.items())[:5]
    ]
    more = f", +{len(hosts) - 5} hosts" if len(hosts) > 5 else ""
    return f" — render: {'; '.join(parts)}{more}" if parts else ""


#: Figures the one-line and table views always show (the others only when not 0); the
#: line begins with them, in this order.
ALWAYS = (Counter.DONE, Counter.QUEUED, Live.IN_FLIGHT, Counter.FAILED)


def figures(p: Progress) -> list[Row]:
    """The figures progress() shows (state/figures.py) worth a glance: those of ALWAYS, and
    every other that is not 0, in their groups' order."""
    return [r for r in p.rows() if r.figure in ALWAYS or r.value]


def line(p: Progress) -> str:
    eta = f" eta={p.eta_s}s" if p.eta_s is not None else ""
    first = {figure: i for i, figure in enumerate(ALWAYS)}
    rows = sorted(figures(p), key=lambda r: first.get(r.figure, len(ALWAYS)))
    shown = " ".join(f"{r.figure}={r.value}" for r in rows)
    pace = f" pages/s={p.pace:.1f}" if p.pace is not None else ""
    return f"[{p.crawl_id}] {p.status}: {shown}{pace}{eta}{paused(p)}"


def table(p: Progress) -> Table:
    """One row per group of figures (formats.Group), as declared."""
    t = Table(title=f"crawl {p.crawl_id} — {p.status}{paused(p)}", expand=False, show_header=False)
    t.add_column("")
    t.add_column("")
    groups: dict[str, list[str]] = {}
    for r in figures(p):
        groups.setdefault(r.figure.group.value, []).append(f"{r.figure} {r.value:,}")
    for group, parts in groups.items():
        t.add_row(group, " · ".join(parts))
    eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "—"
    if p.pace is not None:
        t.add_row("pace", f"{p.pace:.1f} pages/s · eta {eta}")
    if p.outlook and p.outlook.backlog:
        t.caption = "backlog: " + ", ".join(f"{d} {n}" for d, n in p.outlook.backlog)
    return t


def watch(
    crawl: Crawl, interval: float = 0.5, plain_every: float = 5.0, console: Console | None = None
) -> Progress:
    """Show progress until the crawl is finished; returns the last progress."""
    console = console or Console()
    if not console.is_terminal:
        return _watch_plain(crawl, plain_every, console.file)
    with LiveDisplay(table(crawl.read_progress()), console=console, refresh_per_second=4) as live:
        while True:
            p = crawl.read_progress()
            live.update(table(p))
            if p.final:
                return p
            time.sleep(interval)


def _watch_plain(crawl: Crawl, every: float, out: IO[str]) -> Progress:
    last = 0.0
    while True:
        p = crawl.read_progress()
        if p.final or time.monotonic() - last >= every:
            print(line(p), file=out, flush=True)
            last = time.monotonic()
        if p.final:
            return p
        time.sleep(0.25)


def watch_json(crawl: Crawl, every: float = 1.0, out: IO[str] | None = None) -> Progress:
    """``watch --json``: the progress as one JSON object a line, every ``every`` s, until the
    crawl is finished (its last line has a final status); returns the last progress."""
    from .cli_common import dumps

    out = out or sys.stdout
    while True:
        p = crawl.read_progress()
        print(dumps(p.to_json()), file=out, flush=True)
        if p.final:
            return p
        time.sleep(every)
