"""keys.py's table of the keys a crawl writes, read as regular expressions: which keys in a
Redis no row describes (``undescribed``, checked after crawls by the integration tests)."""

from __future__ import annotations

import re

from crawler_tasks.state import keys

_ROW = re.compile(r"^    (P:\S+)\s+(string|hash|list|set|zset|-)\s", re.M)
_PLACEHOLDER = {
    "{C}": r"\{[^:{}/]+\}",
    "{C/N}": r"\{[^:{}/]+/[\d.]+\}",
    "C": r"[^:]+",
    "D": r".+",
    "N": r"\d+",
    "H": r"[0-9a-f]+",
    "S": r"[^:]+",
    "A": r".+",  # a server address (IPv6 ones have colons)
}


def table() -> list[tuple[re.Pattern[str], str]]:
    """keys.py's docstring table as (regex, type) rows (``P`` is the test's prefix)."""
    rows = []
    for pattern, kind in _ROW.findall(keys.__doc__ or ""):
        parts = []
        for i, part in enumerate(pattern.split(":")):
            if i == 0:
                parts.append("crawler")
            elif part in _PLACEHOLDER:
                parts.append(_PLACEHOLDER[part])
            elif part == "ORIGIN":
                parts.append(r"https?://.+")
            elif part == "*":
                parts.append(r".*")
            else:
                parts.append(re.escape(part))
        rows.append((re.compile(":".join(parts) + r"\Z"), kind))
    return rows


def state_fields() -> set[str]:
    """The fields keys.py's table lists for ``P:{C}:state``."""
    doc = keys.__doc__ or ""
    row = doc[doc.index("P:{C}:state") :].split("\n    P:", 1)[0]
    listed = row.split("hash", 1)[1].split("(", 1)[0]  # the fields, before the remark
    return set(re.findall(r"[a-z_]+", listed))


def undescribed(client) -> list[str]:  # type: ignore[no-untyped-def]
    """Keys no row of keys.py's table describes (or of another type), and fields of a
    crawl's state hash that neither the table nor CrawlState (state/crawl_state.py) names."""
    from crawler_tasks.state.crawl_state import FIELDS

    rows = table()
    documented = state_fields()
    bad = []
    for raw in client.scan_iter(match="crawler:*", count=1000):
        key = raw.decode()
        kind = client.type(raw).decode()
        if not any(rx.match(key) and want in (kind, "-") for rx, want in rows):
            bad.append(f"{key} ({kind})")
        if key.endswith("}:state") and kind == "hash":
            fields = {f.decode() for f in client.hkeys(raw)}
            bad += [f"{key} field {f}" for f in sorted(fields - (FIELDS & documented))]
    return bad
