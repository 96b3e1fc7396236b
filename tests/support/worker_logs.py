"""The tracebacks in worker processes' logs: a test fails on any it does not allow
(``@pytest.mark.allow_worker_errors``, the ``worker_logs`` fixture in tests/conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):$", re.M)


def tracebacks(text: str) -> list[str]:
    """Each traceback in a log, with the log line before it (Celery names the task there) and
    up to the exception line (the first unindented line after the frames)."""
    found = []
    for match in _TRACEBACK.finditer(text):
        before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
        lines = text[match.end() :].lstrip("\n").splitlines()
        end = next((i for i, line in enumerate(lines) if line and not line[0].isspace()), None)
        body = lines if end is None else lines[: end + 1]
        found.append("\n".join([before, match.group(0), *body]))
    return found


def unexpected_tracebacks(log_dir: Path, allowed: list[str]) -> list[str]:
    out = []
    for log in sorted(log_dir.glob("*.log")):
        for tb in tracebacks(log.read_text(errors="replace")):
            if not any(re.search(pattern, tb) for pattern in allowed):
                out.append(f"--- {log.name}\n{tb}")
    return out
