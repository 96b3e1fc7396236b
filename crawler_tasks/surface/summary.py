"""What ``crawler crawl`` prints when a crawl ends (``summary.json`` in words); what its exit
status says of it is :attr:`Summary.failed <crawler_tasks.state.figures.Summary.failed>`."""

from __future__ import annotations

from ..state.formats import Counter, Group
from ..state.summary import Summary


def summary_text(s: Summary) -> str:
    fam = s.families
    rate = s[Counter.DONE] / s.duration_s if s.duration_s else 0.0
    lines = [
        f"crawl {s.crawl_id} {s.status} in {s.duration_s:.1f}s ({rate:.1f} pages/s)",
        _pages(s),
        f"  status codes: {dict(fam.status_codes)}",
    ]
    if s.error:
        lines.insert(1, f"  error: {s.error}")
    elif s.failed:
        why = s.notes.first_failure or f"robots.txt: {s.robots_unreachable_why}"
        said = "nothing fetched" if not s[Counter.FETCHED] else "every URL failed"
        lines.insert(1, f"  {said}: {why}")
    elif s.notes.first_failure:
        lines.append(f"  first failure: {s.notes.first_failure}")
    if fam.failures:
        lines.append(f"  failures: {dict(fam.failures)}")
    if s.tls_error_why:
        hint = s.notes.tls_hint or (
            "a private CA? give its PEM file to every worker and to this command: CRAWLER_CA_BUNDLE"
        )
        lines.append(f"  TLS failed: {s.tls_error_why} ({hint})")
    if s.notes.first_extract_error:
        lines.append(f"  first extract error: {s.notes.first_extract_error}")
    if s.notes.output_dir:
        lines.append(f"  files: {s.notes.output_dir}")
    if fam.changes:
        lines.append(f"  changes since the previous run: {dict(fam.changes)}")
    return "\n".join(lines)


def _pages(s: Summary) -> str:
    """The counters by group, as declared (formats.Counter): the pages group in full, every
    other group's counters that are not 0 ("done" counts no URL a cancel dropped)."""
    groups: dict[str, list[str]] = {}
    for row in s.rows():
        if row.figure.group is not Group.PAGES and not row.value:
            continue
        part = f"{row.value} {row.figure}"
        if row.figure is Counter.ROBOTS_UNREACHABLE and s.robots_unreachable_why:
            part += f" (e.g. {s.robots_unreachable_why})"
        groups.setdefault(row.figure.group.value, []).append(part)
    return "  " + "; ".join(f"{g}: {', '.join(parts)}" for g, parts in groups.items())
