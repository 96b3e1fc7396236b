"""glibc's malloc arenas in a worker process (``CRAWLER_MALLOC_ARENAS``: Settings.malloc_arenas).

glibc gives a threaded process up to 8 arenas a core, each thread allocating from the one it
was handed: a fetch process's 256 threads spread their bodies, TLS buffers and lxml trees
over them, and what one arena frees another's threads do not reuse, so the peak RSS grows
with the fragmentation. Two arenas cut a fetch process's peak by ~45 MB on the broad HTTPS
bench (275-281 MB to 229-233 MB, three alternated runs each) at no measured CPU cost
(bench/README.md, issue 32). Set when a worker starts (Celery's ``worker_init``), before its
pool's threads do; a pool child forked later inherits it. Without glibc (musl, macOS)
nothing is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from celery.signals import worker_init

from .app import app

#: mallopt's parameter for the arena cap (glibc's malloc.h).
M_ARENA_MAX = -8


def limit_arenas(n: int) -> bool:
    """At most ``n`` malloc arenas in this process from now on; False if nothing was set
    (``n`` 0 keeps glibc's default; no glibc)."""
    if n <= 0:
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, n) == 1)


@worker_init.connect
def _at_start(**_: Any) -> None:
    settings = app.conf.get("crawler_settings")
    if settings is not None:  # else the worker stops for its bad settings (lifecycle.py)
        limit_arenas(settings.malloc_arenas)
