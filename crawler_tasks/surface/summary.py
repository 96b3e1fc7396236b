"""What ``crawler crawl`` prints when a crawl ends (``summary.json`` in words) and what its
exit status says of it."""

from __future__ import annotations

from typing import Any

from ..state.formats import TLS_NOTE, Counter, Group
from ..state.stats import LIVE, declared


def failed(summary: dict[str, Any]) -> bool:
    """Stopped by an error of its setup (a hook no worker can import), or nothing fetched
    because every URL failed (a mistyped port, a private CA the workers were not given): a
    crawl that must not look like a success to a script."""
    if summary.get("error"):
        return True
    c = summary.get("counters", {})
    return not c.get("fetched", 0) and bool(c.get("failed", 0) or c.get("robots_unreachable", 0))


def summary_text(s: dict[str, Any]) -> str:
    c = s.get("counters", {})
    done = c.get("done", 0)
    rate = done / s["duration_s"] if s.get("duration_s") else 0.0
    lines = [
        f"crawl {s['crawl_id']} {s['status']} in {s['duration_s']:.1f}s ({rate:.1f} pages/s)",
        _pages(s, c),
        f"  status codes: {s.get('status_codes', {})}",
    ]
    if s.get("error"):
        lines.insert(1, f"  error: {s['error']}")
    elif failed(s):
        why = s.get("first_failure") or f"robots.txt: {s.get('robots_unreachable_why')}"
        lines.insert(1, f"  nothing fetched: {why}")
    elif s.get("first_failure"):
        lines.append(f"  first failure: {s['first_failure']}")
    if s.get("failures"):
        lines.append(f"  failures: {s['failures']}")
    if s.get(TLS_NOTE):
        hint = s.get("tls_hint") or (
            "a private CA? give its PEM file to every worker and to this command: CRAWLER_CA_BUNDLE"
        )
        lines.append(f"  TLS failed: {s[TLS_NOTE]} ({hint})")
    if s.get("first_extract_error"):
        lines.append(f"  first extract error: {s['first_extract_error']}")
    if s.get("output_dir"):
        lines.append(f"  files: {s['output_dir']}")
    if s.get("changes"):
        lines.append(f"  changes since the previous run: {s['changes']}")
    return "\n".join(lines)


def _pages(s: dict[str, Any], c: dict[str, int]) -> str:
    """The counters by group, as declared (formats.Counter): the pages group in full, every
    other group's counters that are not 0 ("done" counts no URL a cancel dropped)."""
    groups: dict[str, list[str]] = {}
    for row in declared(c):
        if row["name"] in LIVE or (row["group"] != Group.PAGES.value and not row["value"]):
            continue
        part = f"{row['value']} {row['name']}"
        if row["name"] == Counter.ROBOTS_UNREACHABLE and s.get("robots_unreachable_why"):
            part += f" (e.g. {s['robots_unreachable_why']})"
        groups.setdefault(row["group"], []).append(part)
    return "  " + "; ".join(f"{g}: {', '.join(parts)}" for g, parts in groups.items())
