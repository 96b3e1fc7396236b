"""Named fault points, for the fault suite only: a worker started with
``CRAWLER_FAULT_POINT=name`` (or ``name:N``) SIGKILLs itself the N-th time (default: the first)
it reaches :func:`point` ``name``. So a test kills a process at an exact step of the finish
path instead of hoping a random kill lands there. Unset, a point costs one comparison.
"""

from __future__ import annotations

import os
import signal
import threading

_lock = threading.Lock()
_seen: dict[str, int] = {}


def point(name: str) -> None:
    wanted = os.environ.get("CRAWLER_FAULT_POINT")
    if not wanted or wanted.split(":", 1)[0] != name:
        return
    nth = int(wanted.split(":", 1)[1]) if ":" in wanted else 1
    with _lock:
        _seen[name] = _seen.get(name, 0) + 1
        if _seen[name] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
