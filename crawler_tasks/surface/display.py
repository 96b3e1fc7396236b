"""Live crawl progress for a person: a rich display on a terminal, plain periodic lines when
stdout is a pipe or a file (CI logs, ``| tee``)."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..state.formats import TLS_NOTE, Status
from ..state.health import Memory, admission_paused
from ..state.stats import declared
from .crawl import Crawl


def rate(p: dict[str, Any]) -> float:
    """Pages/s to show: of the last seconds while running, of the whole crawl once over."""
    final = Status(p["status"]).final
    return float(p["pages_per_s"] if final else p["recent_pages_per_s"])


def paused(p: dict[str, Any]) -> str:
    """What holds the crawl back, to append to a status line: its output cannot be written
    (``output: disk full at DIR``), or Redis is nearly full (``admission paused: Redis out of
    memory (used X of maxmemory Y)``); "" when nothing does."""
    text = f" — error: {p['error']}" if p.get("error") else ""
    if p.get("output"):
        text += f" — output: {p['output']} (writing paused; resumes when there is room)"
    for d in p.get("hosts_down") or ():
        down_for = time.time() - d["down_since"]
        text += f" — {d['domain']} down {down_for:.0f}s, next probe in {d['next_probe_s']:.0f}s"
    if p.get(TLS_NOTE):  # every page of that host fails so: a CA the workers lack?
        text += f" — {p[TLS_NOTE]}"
    text += render_note(p)
    mem = p.get("redis_memory")
    if p.get("admission_paused") and mem:
        text += " — " + admission_paused(Memory(mem["used_bytes"], mem["maxmemory_bytes"]))
    return text


def render_note(p: dict[str, Any]) -> str:
    """``render=auto``'s decisions: " — render: host render (5/12 rendered, 4 added)": of the
    host's 12 fetched pages with a script (render_plan.lua's ``pages``), 5 rendered and
    compared (``renders``: each URL once, a redelivered render is not counted again, so never
    more than the pages), 4 of which added links or text."""
    hosts = p.get("render_hosts") or {}
    parts = [
        f"{h} {v.get('mode', '?')} ({v.get('renders', 0)}/{v.get('pages', 0)} rendered, "
        f"{v.get('gains', 0)} added)"
        for h, v in sorted(hosts.items())[:5]
    ]
    more = f", +{len(hosts) - 5} hosts" if len(hosts) > 5 else ""
    return f" — render: {'; '.join(parts)}{more}" if parts else ""


#: Figures the one-line and table views always show (the others only when not 0); the
#: line begins with them, in this order.
ALWAYS = ("done", "queued", "in_flight", "failed")


def figures(p: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared counters and live figures (state/stats.declared) worth a glance: those
    of ALWAYS, and every other that is not 0, in their groups' order."""
    return [r for r in declared(p) if r["name"] in ALWAYS or r["value"]]


def line(p: dict[str, Any]) -> str:
    eta = f" eta={p['eta_s']}s" if p.get("eta_s") is not None else ""
    first = {name: i for i, name in enumerate(ALWAYS)}
    rows = sorted(figures(p), key=lambda r: first.get(r["name"], len(ALWAYS)))
    shown = " ".join(f"{r['name']}={r['value']}" for r in rows)
    return f"[{p['crawl_id']}] {p['status']}: {shown} pages/s={rate(p):.1f}{eta}{paused(p)}"


def table(p: dict[str, Any]) -> Table:
    """One row per group of figures (formats.Group), as declared."""
    t = Table(
        title=f"crawl {p['crawl_id']} — {p['status']}{paused(p)}", expand=False, show_header=False
    )
    t.add_column("")
    t.add_column("")
    groups: dict[str, list[str]] = {}
    for r in figures(p):
        groups.setdefault(r["group"], []).append(f"{r['name']} {r['value']:,}")
    for group, parts in groups.items():
        t.add_row(group, " · ".join(parts))
    eta = f"{p['eta_s']:.0f}s" if p.get("eta_s") is not None else "—"
    t.add_row("pace", f"{rate(p):.1f} pages/s · eta {eta}")
    if p.get("backlog"):
        t.caption = "backlog: " + ", ".join(f"{d} {n}" for d, n in p["backlog"])
    return t


def watch(
    crawl: Crawl, interval: float = 0.5, plain_every: float = 5.0, console: Console | None = None
) -> dict[str, Any]:
    """Show progress until the crawl is finished; returns the last progress."""
    console = console or Console()
    if not console.is_terminal:
        return _watch_plain(crawl, plain_every, console.file)
    with Live(table(crawl.progress()), console=console, refresh_per_second=4) as live:
        while True:
            p = crawl.progress()
            live.update(table(p))
            if Status(p["status"]).final:
                return p
            time.sleep(interval)


def _watch_plain(crawl: Crawl, every: float, out: IO[str]) -> dict[str, Any]:
    last = 0.0
    while True:
        p = crawl.progress()
        done = Status(p["status"]).final
        if done or time.monotonic() - last >= every:
            print(line(p), file=out, flush=True)
            last = time.monotonic()
        if done:
            return p
        time.sleep(0.25)


def watch_json(crawl: Crawl, every: float = 1.0, out: IO[str] | None = None) -> dict[str, Any]:
    """``watch --json``: the progress as one JSON object a line, every ``every`` s, until the
    crawl is finished (its last line has a final status); returns the last progress."""
    from .cli_common import dumps

    out = out or sys.stdout
    while True:
        p = crawl.progress()
        print(dumps(p), file=out, flush=True)
        if Status(p["status"]).final:
            return p
        time.sleep(every)
