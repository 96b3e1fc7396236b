"""How ``make test`` shares the tests among its xdist processes (``pytest -n N``).

One test at a time to whichever process is free (xdist's ``load``), but for two exceptions:

* a module whose tests share one costly module fixture runs whole on one process, so the
  fixture is built once (``ONE_PROCESS``). xdist's own ``--dist loadgroup`` would do it from
  ``@pytest.mark.xdist_group``, but with pytest 9.2 its group suffix on the node id is lost
  (xdist 3.8 writes ``Item._nodeid``, which pytest no longer reads) and the tests spread;
* the modules of long fault tests (30-70 s each, mostly waiting) are handed out first, so
  none of them starts last and holds the run up alone (``SLOW_FIRST``).

Within these ranks the order stays the collection's, which pytest-randomly shuffles with one
seed for every process.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

#: Modules built around one module-scoped fixture: a 3-master Redis Cluster (test_cluster,
#: test_overload_cluster), one hostile crawl that every test then inspects (test_hostile_web),
#: one crawl exported in every format (test_export).
ONE_PROCESS = frozenset(
    {
        "tests/test_cluster.py",
        "tests/test_overload_cluster.py",
        "tests/test_hostile_web.py",
        "tests/test_export.py",
    }
)

#: Modules with tests of 20-70 s (outages, kills, maxmemory; browsers, crawls at a few requests
#: a second); measured with ``--durations``. A module missing here only makes the run end
#: later, never fail. The fault tier's first (``make test-faults``), then ``make test``'s.
SLOW_FIRST = (
    "tests/test_redis_faults.py",
    "tests/test_faults.py",
    "tests/test_maxmemory.py",
    "tests/test_disk_full.py",
    "tests/test_overload.py",
    "tests/test_bench_smoke.py",
    "tests/test_lease_exits.py",
    "tests/test_render.py",
    "tests/test_dashboard_browser.py",
    "tests/test_cli.py",
    "tests/test_render_workers.py",
    "tests/test_hooks_workers.py",
    "tests/test_pacing.py",
    "tests/test_operations.py",
    "tests/test_cli_json.py",
    "tests/test_crawl.py",
    "tests/test_affinity.py",
    "tests/test_politeness.py",
)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _rank(scope: str) -> int:
    module = _module(scope)
    if module in ONE_PROCESS:
        return 0
    return 1 if module in SLOW_FIRST else 2


class SuiteScheduling(LoadScopeScheduling):
    """A scope per test, or per module for ``ONE_PROCESS``; long ones handed out first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ranked = False

    def _split_scope(self, nodeid: str) -> str:
        module = _module(nodeid)
        return module if module in ONE_PROCESS else nodeid

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ranked:  # the work queue is complete from the first assignment on
            self._ranked = True
            units = sorted(self.workqueue.items(), key=lambda unit: _rank(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)
