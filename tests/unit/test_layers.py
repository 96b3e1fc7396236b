"""The package's layers, as the tree shows them, with imports pointing one way only:

    surface  ->  worker  ->  state  ->  web  ->  foundation (errors, settings, limits, environment, redaction)

A module may import its own layer and any layer below it, never one above. Checked on the
source (every ``import``, also inside functions and under ``TYPE_CHECKING``), so a lazy import
cannot hide a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "crawler_tasks"
ORDER = ["foundation", "web", "state", "worker", "surface"]
FOUNDATION = {"errors", "settings", "limits", "environment", "redaction"}


def layer_of(module: str) -> str:
    """``crawler_tasks.state.keys`` -> ``state``; the package root counts as the top."""
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    if parts[1] in FOUNDATION:
        return "foundation"
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[str]:
    """Modules of the package that ``path`` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("crawler_tasks"):
                found.append(target)  # ``from ..worker import pipeline`` names a module too
                found += [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("crawler_tasks")]
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_module_sits_in_a_layer() -> None:
    for path in MODULES:
        layer = layer_of(module_name(path))
        assert layer in ORDER or module_name(path) == "crawler_tasks", path


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_point_down(path: Path) -> None:
    name = module_name(path)
    mine = layer_of(name)
    if mine == "top":
        return  # the package root is the public API: it may import anything
    upward = [
        target
        for target in imports(path)
        if layer_of(target) in ORDER and ORDER.index(layer_of(target)) > ORDER.index(mine)
    ]
    assert not upward, f"{name} ({mine}) imports upward: {upward}"


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The rule above is not vacuous: an import from a higher layer is found."""
    bad = PACKAGE / "web" / "urls.py"
    text = bad.read_text("utf-8") + "\nfrom ..worker.visit import pipeline\n"
    probe = PACKAGE / "web" / "_probe_upward.py"
    probe.write_text(text, "utf-8")
    try:
        found = [t for t in imports(probe) if layer_of(t) == "worker"]
    finally:
        probe.unlink()
    assert "crawler_tasks.worker.visit.pipeline" in found


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """module -> the package's modules it imports (lazy and TYPE_CHECKING imports too)."""
    names = {module_name(p) for p in paths}
    return {
        module_name(p): {t for t in imports(p) if t in names and t != module_name(p)} for p in paths
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the strongly connected components of more than one module
    (Tarjan's algorithm, iterative: no recursion limit on a deep package)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            nxt = next((t for t in targets if t not in index or t in stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            if nxt is not None:
                low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_no_import_circle_anywhere() -> None:
    """No module reaches itself through imports, inside a layer as well as between layers
    (a circle inside surface/ passes the direction check above)."""
    found = circles(import_graph(MODULES))
    assert not found, f"import circles (break each along a seam): {found}"


def test_the_circle_check_catches_a_circle_inside_a_layer() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert circles(graph) == [["a", "b", "c"]]
    # And on the real package: a surface module importing back the one that imports it.
    real = import_graph(MODULES)
    real["crawler_tasks.surface.host_table"].add("crawler_tasks.surface.dashboard_state")
    assert any("crawler_tasks.surface.host_table" in c for c in circles(real))


def test_the_dashboard_process_imports_no_worker_module() -> None:
    """The dashboard's app (its command, handlers and figures) loads no worker module: their
    import registers Celery signal handlers and the dispatcher's bootstep."""
    code = (
        "import sys, crawler_tasks.surface.dashboard, crawler_tasks.surface.dashboard_app;"
        "print(' '.join(m for m in sys.modules if m.startswith('crawler_tasks.worker')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


#: The rooms of ``worker/``, lowest first (crawler_tasks/worker/__init__.py): a room imports its
#: own modules and the rooms below it. ``worker``'s own modules (tasks, the process's
#: lifecycle around them, __main__, the hooks face) sit above every room.
WORKER_ROOMS = ["process", "output", "render", "runtime", "visit", "dispatch"]


def room_of(module: str) -> str | None:
    """``crawler_tasks.worker.visit.settle`` -> ``visit``; None outside worker/; ``top`` for
    worker's own modules."""
    parts = module.split(".")
    if parts[:2] != ["crawler_tasks", "worker"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in WORKER_ROOMS else "top"


WORKER_MODULES = [p for p in MODULES if room_of(module_name(p)) is not None]


def test_every_worker_module_sits_in_a_room() -> None:
    """worker/ holds its rooms and, beside them, only the tasks, the process's lifecycle (it
    starts the dispatcher, the top room), the entry point and the hooks face: a new module
    goes into a room."""
    tops = {module_name(p) for p in WORKER_MODULES if room_of(module_name(p)) == "top"}
    assert tops == {
        "crawler_tasks.worker.tasks",
        "crawler_tasks.worker.lifecycle",
        "crawler_tasks.worker.__main__",
        "crawler_tasks.worker.hooks",
    }


def upward_rooms(path: Path) -> list[str]:
    mine = room_of(module_name(path))
    if mine in (None, "top"):
        return []
    rank = WORKER_ROOMS.index(mine)
    found = []
    for target in imports(path):
        room = room_of(target)
        if room == "top" or (room in WORKER_ROOMS and WORKER_ROOMS.index(room) > rank):
            found.append(target)
    return found


@pytest.mark.parametrize("path", WORKER_MODULES, ids=lambda p: module_name(p))
def test_worker_rooms_import_down(path: Path) -> None:
    upward = upward_rooms(path)
    assert not upward, f"{module_name(path)} imports a room above its own: {upward}"


def test_the_room_check_catches_an_upward_import() -> None:
    probe = PACKAGE / "worker" / "process" / "_probe_room.py"
    probe.write_text("from ..visit import settle\nfrom .. import tasks\n", "utf-8")
    try:
        found = upward_rooms(probe)
    finally:
        probe.unlink()
    assert "crawler_tasks.worker.visit.settle" in found
    assert "crawler_tasks.worker.tasks" in found


def test_no_room_holds_more_than_twelve_modules() -> None:
    """A room past a dozen modules has rooms of its own inside: split it."""
    for room in WORKER_ROOMS:
        modules = [p for p in (PACKAGE / "worker" / room).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 12, f"worker/{room}/ holds {len(modules)} modules"


#: House rule: a module longer than this is split along a seam (issue 21), and a class longer
#: than MAX_CLASS_LINES (issue 47): a module kept under its cap by moving its mass into one
#: class, or by folding lines, is not split. ``make lint`` warns from WARN_MODULE_LINES, so
#: that a split comes before the cap, not a squeeze at it.
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 200
WARN_MODULE_LINES = 350


def oversized(paths: list[Path], root: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """ "path: N lines" (relative to ``root``) for each of ``paths`` over ``limit`` lines."""
    lengths = {p: len(p.read_text("utf-8").splitlines()) for p in paths}
    return [f"{p.relative_to(root)}: {n} lines" for p, n in lengths.items() if n > limit]


def is_declaration(stmt: ast.stmt, first: bool) -> bool:
    """A statement of a class body that declares and does nothing: an assignment with or
    without annotation (a dataclass field, an enum member, a constant, ``_value_: str``),
    ``pass``, or the docstring (the body's first statement, a string)."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Pass)):
        return True
    return (
        first
        and isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def class_lines(node: ast.ClassDef) -> int:
    """The lines of a class that count against MAX_CLASS_LINES: from its ``class`` line to its
    last, less its declarations (:func:`is_declaration`), each with the comment and blank
    lines above it. A class of declarations only counts 1 whatever its length (a declaration
    of every setting, counter or option is exempt); every method, nested class or statement
    that runs counts in full, with the lines above it."""
    total = (node.end_lineno or node.lineno) - node.lineno + 1
    before = node.body[0].lineno - 1  # the ``class`` line (and a signature over several)
    declared = 0
    for i, stmt in enumerate(node.body):
        if is_declaration(stmt, i == 0):
            declared += (stmt.end_lineno or stmt.lineno) - before
        before = stmt.end_lineno or stmt.lineno
    return total - declared


def big_classes(paths: list[Path], root: Path, limit: int = MAX_CLASS_LINES) -> list[str]:
    """ "path:Class: N lines" for each class (nested ones too) of ``paths`` over ``limit``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and class_lines(node) > limit:
                found.append(f"{path.relative_to(root)}:{node.name}: {class_lines(node)} lines")
    return found


def test_no_module_is_over_400_lines() -> None:
    found = oversized(MODULES, PACKAGE)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them): {found}"


def test_no_class_is_over_200_lines() -> None:
    found = big_classes(MODULES, PACKAGE)
    assert not found, (
        f"classes over {MAX_CLASS_LINES} lines, declarations aside (split them): {found}"
    )


def test_the_size_check_catches_a_long_module(tmp_path: Path) -> None:
    """The rule above is not vacuous: 401 lines are found and named, 400 are not."""
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), "utf-8")
    short.write_text("x = 1\n" * MAX_MODULE_LINES, "utf-8")
    assert oversized([long, short], tmp_path) == [f"long.py: {MAX_MODULE_LINES + 1} lines"]


def _method(name: str, lines: int) -> str:
    return f"    def {name}(self) -> None:\n" + "        x = 1\n" * (lines - 1)


def test_the_class_check_catches_a_big_class(tmp_path: Path) -> None:
    """A class of 201 counted lines is found in a module far under 400 lines, 200 are not;
    nested classes are measured too."""
    big = "class Big:\n" + _method("a", 100) + _method("b", 100)  # 1 + 200 lines
    fits = "class Fits:\n" + _method("a", 100) + _method("b", 99)  # 1 + 199 lines
    outer = "class Outer:\n    class Inner:\n" + _method("a", 201).replace("\n    ", "\n        ")
    source = tmp_path / "m.py"
    source.write_text(f"{big}\n{fits}\n", "utf-8")
    assert big_classes([source], tmp_path) == ["m.py:Big: 201 lines"]
    source.write_text(f"{fits}\n" + outer.replace("    def a", "        def a", 1), "utf-8")
    assert [f.split(":")[1] for f in big_classes([source], tmp_path)] == ["Outer", "Inner"]


def test_declarations_are_exempt_but_methods_beside_them_are_not(tmp_path: Path) -> None:
    """Fields, members and constants with their comments do not count (a declaration of 300
    settings passes); a method among them counts in full, its comment lines too."""
    fields = "".join(f"    #: the {i}th, in seconds\n    f{i}: float = {i}.0\n" for i in range(300))
    decl = f'class Decl:\n    """Doc."""\n\n{fields}'
    mixed = f"{decl.replace('Decl', 'Mixed')}\n    # why it runs\n{_method('m', 200)}"
    source = tmp_path / "m.py"
    source.write_text(f"{decl}\n\n{mixed}", "utf-8")
    sizes = {
        n.name: class_lines(n)
        for n in ast.walk(ast.parse(source.read_text()))
        if isinstance(n, ast.ClassDef)
    }
    assert sizes == {"Decl": 1, "Mixed": 1 + 2 + 200}  # the class line, blank + comment, method
    assert big_classes([source], tmp_path) == ["m.py:Mixed: 203 lines"]


def test_public_api_is_unchanged() -> None:
    import crawler_tasks

    for name in ("app", "start_crawl", "Crawl", "list_crawls", "crawl_finished"):
        assert hasattr(crawler_tasks, name)
    assert {"crawl.fetch", "crawl.parse", "crawl.start_scheduled"} <= set(crawler_tasks.app.tasks)


def warn(paths: list[Path], root: Path) -> list[str]:
    """The modules over WARN_MODULE_LINES: the ones to split before the next change grows
    them to the cap."""
    return oversized(paths, root, WARN_MODULE_LINES)


if __name__ == "__main__":  # ``python -m tests.unit.test_layers --warn``, from ``make lint``
    if sys.argv[1:] != ["--warn"]:
        sys.exit("usage: python -m tests.unit.test_layers --warn")
    for line in warn(MODULES, PACKAGE.parent):
        print(
            f"warning: {line} (over {WARN_MODULE_LINES}: split along a seam before the cap, {MAX_MODULE_LINES})"
        )
