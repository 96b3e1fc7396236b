"""Where things are in the checkout, for tests and benchmarks that read its files or start
processes with a directory of ours on their ``PYTHONPATH``."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
#: The checkout.
ROOT = SUPPORT.parent.parent
BENCH = ROOT / "bench"
#: Hook modules (crawl_hooks, extract_hooks) that worker processes import by name: the
#: directory goes on their ``PYTHONPATH`` (not a package).
HOOKS = SUPPORT / "hooks"
#: A ``sitecustomize`` that resolves test host names to loopback addresses, for the
#: ``PYTHONPATH`` of the processes that resolve them.
RESOLVER = SUPPORT / "resolver"
DATA = SUPPORT / "data"
