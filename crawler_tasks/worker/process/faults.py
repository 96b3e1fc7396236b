"""Named fault points, for the fault suite only: a worker started with
``CRAWLER_FAULT_POINT=name`` (or ``name:N``) SIGKILLs itself the N-th time (default: the first)
it reaches :func:`point` ``name`` (``name:N:stop``: SIGSTOPs itself there, frozen until a
SIGCONT). So a test kills a process at an exact step of the finish
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
    _, nth, how = [*wanted.split(":"), "1", ""][:3]
    with _lock:
        _seen[name] = _seen.get(name, 0) + 1
        if _seen[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)
