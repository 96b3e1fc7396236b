"""How ``pytest -n N`` (``make test``, ``make test-faults``) shares the tests among its xdist
processes.

One test at a time to whichever process is free (xdist's ``load``), but for two exceptions,
each declared by the module itself, as a module marker (``pytestmark = pytest.mark.NAME``):

* ``one_process``: the module's tests share one costly module fixture (a 3-master Redis
  Cluster, one crawl that every test then inspects), so it runs whole on one process and the
  fixture is built once. xdist's own ``--dist loadgroup`` would do it from
  ``@pytest.mark.xdist_group``, but with pytest 9.2 its group suffix on the node id is lost
  (xdist 3.8 writes ``Item._nodeid``, which pytest no longer reads) and the tests spread;
* ``slow``: tests of 20-70 s (browsers, crawls at a few requests a second; measured with
  ``--durations``), handed out first so that none of them starts last and holds the run up
  alone. Every module in tests/faults (outages, kills, maxmemory: 30-120 s, mostly waiting)
  and tests/bench is slow by its place. A slow module left unmarked only makes the run end
  later, never fail.

The scheduler runs in the controlling process, which collects nothing: it sees node ids
only, so it reads the marker from the module's source (its top-level ``pytestmark``); the
marker is also a real one, registered in tests/conftest.py, that ``-m`` can select.

Within these ranks the order stays the collection's, which pytest-randomly shuffles with one
seed for every process.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

#: Tiers whose every module is slow (see above), by their directory under tests/.
SLOW_TIERS = ("tests/faults/", "tests/bench/")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def module_markers(source: str) -> frozenset[str]:
    """The marker names of a module's top-level ``pytestmark`` (one marker or a list of
    them, each ``pytest.mark.NAME`` or ``pytest.mark.NAME(...)``)."""
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            continue
        for sub in ast.walk(node.value):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            ):
                names.add(sub.attr)
    return frozenset(names)


class SuiteScheduling(LoadScopeScheduling):
    """A scope per test, or per module for ``one_process``; slow ones handed out first."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._root = Path(config.rootpath)
        self._ranked = False

    @functools.cache  # noqa: B019 - one scheduler a run; a module's source read once
    def _markers(self, module: str) -> frozenset[str]:
        path = self._root / module
        return module_markers(path.read_text("utf-8")) if path.is_file() else frozenset()

    def _rank(self, scope: str) -> int:
        module = _module(scope)
        markers = self._markers(module)
        if "one_process" in markers:
            return 0
        return 1 if "slow" in markers or module.startswith(SLOW_TIERS) else 2

    def _split_scope(self, nodeid: str) -> str:
        module = _module(nodeid)
        return module if "one_process" in self._markers(module) else nodeid

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ranked:  # the work queue is complete from the first assignment on
            self._ranked = True
            units = sorted(self.workqueue.items(), key=lambda unit: self._rank(unit[0]))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)
