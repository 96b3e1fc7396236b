"""The walk of one URL: which of the crawler's functions one page's trip enters, from its fetch
task to its final record, read with :func:`sys.setprofile` while the real pipeline runs in
process (tests/support/driver.py) against a real Redis and a real local server.

A *stop* is a distinct function (one code object: a lambda or a nested function is a stop of
its own) entered on the way; a *return point* is a stop the walk comes back to from a stop it
called and then leaves again for another stop (a step that hands the URL to a second step
after the first came back: the places a reader has to keep in mind while following the trip).
Comprehensions are not stops (they are expressions of the function they are written in).
Both are counted per scope: the visit's own room (``worker/visit/``), the steps (``visit/``
and ``runtime/``, which one URL's steps call for its crawl's store, runtime, send gate and
room: the walk issue 47 is about), the worker layer and the whole package; a call from one
stop of a scope to another through functions outside it counts as a direct call. Only the
thread that runs the task is traced; the functions are read from the code that ran, so the
figure moves with the code and not with a list kept by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, TypeVar

import crawler_tasks

PACKAGE = Path(crawler_tasks.__file__).resolve().parent
#: Scopes, as folders of the package (the package itself last).
SCOPES = {
    "visit": (PACKAGE / "worker" / "visit",),
    "steps": (PACKAGE / "worker" / "visit", PACKAGE / "worker" / "runtime"),
    "worker": (PACKAGE / "worker",),
    "all": (PACKAGE,),
}
#: Not stops: comprehensions are the expressions of the function they are written in (and
#: Python 3.12 compiles them into it, PEP 709).
_INLINE = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")
T = TypeVar("T")


def _name(code: CodeType) -> str:
    path = Path(code.co_filename).resolve().relative_to(PACKAGE)
    return f"{path.with_suffix('')}:{code.co_qualname}:{code.co_firstlineno}"


@dataclass
class Walk:
    """The functions one trip entered, in order of first entry, and who came back to whom."""

    stops: list[str] = field(default_factory=list)
    #: stop -> the stops it called, in order of first call.
    calls: dict[str, list[str]] = field(default_factory=dict)

    def within(self, scope: str) -> Walk:
        """The walk as seen in ``scope``: its stops, and a call from one to another through
        stops outside it counted as a direct call."""
        inside = {s for s in self.stops if _in_scope(s, scope)}
        calls: dict[str, list[str]] = {}

        def reached(stop: str, seen: set[str]) -> Iterator[str]:
            for callee in self.calls.get(stop, []):
                if callee in seen:
                    continue
                seen.add(callee)
                if callee in inside:
                    yield callee
                else:
                    yield from reached(callee, seen)

        for stop in inside:
            calls[stop] = list(dict.fromkeys(reached(stop, {stop})))
        return Walk([s for s in self.stops if s in inside], calls)

    @property
    def return_points(self) -> list[str]:
        """Stops that called two stops or more: the walk came back to them and went on."""
        return [s for s in self.stops if len(self.calls.get(s, [])) >= 2]

    def figures(self) -> dict[str, tuple[int, int]]:
        """(stops, return points) per scope."""
        out = {}
        for scope in SCOPES:
            seen = self.within(scope)
            out[scope] = (len(seen.stops), len(seen.return_points))
        return out


def _in_scope(stop: str, scope: str) -> bool:
    folders = [folder.relative_to(PACKAGE) for folder in SCOPES[scope]]
    return scope == "all" or any(stop.startswith(f"{folder}/") for folder in folders)


class Tracer:
    """Adds what each traced call enters to one :class:`Walk` (several tasks: one trip)."""

    def __init__(self) -> None:
        self.walk = Walk()
        self._stack: list[str | None] = []

    def run(self, call: Callable[[], T]) -> T:
        self._stack = []
        previous = sys.getprofile()
        sys.setprofile(self._event)
        try:
            return call()
        finally:
            sys.setprofile(previous)

    def _event(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            name = self._ours(frame.f_code)
            if name is not None:
                caller = next((s for s in reversed(self._stack) if s is not None), None)
                if name not in self.walk.calls:
                    self.walk.stops.append(name)
                    self.walk.calls[name] = []
                if caller is not None and name != caller and name not in self.walk.calls[caller]:
                    self.walk.calls[caller].append(name)
            self._stack.append(name)
        elif event == "return" and self._stack:
            self._stack.pop()

    @staticmethod
    def _ours(code: CodeType) -> str | None:
        if not code.co_filename.startswith(str(PACKAGE)) or code.co_name in _INLINE:
            return None
        return _name(code)


@contextmanager
def traced(module: Any, name: str, wanted: Callable[..., bool]) -> Iterator[Tracer]:
    """While in the block, calls of ``module.name`` whose arguments ``wanted`` accepts run
    under one :class:`Tracer` (the others as they are)."""
    tracer, original = Tracer(), getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not wanted(*args, **kwargs):
            return original(*args, **kwargs)
        return tracer.run(lambda: original(*args, **kwargs))

    setattr(module, name, wrapper)
    try:
        yield tracer
    finally:
        setattr(module, name, original)
