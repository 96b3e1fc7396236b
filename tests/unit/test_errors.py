"""One exception tree, every class in it used (httpx's ``_exceptions.py`` rule): a class that
nothing raises is a reason no record ever carries, and one missing from the tree is a failure
the docs do not explain."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import crawler_tasks.errors as errors

PACKAGE = Path(errors.__file__).parent
#: Bases that are caught (``except RetryableError``), never raised themselves.
BASES = {"CrawlerError", "RetryableError", "PermanentError", "Unreachable"}


def _declared() -> dict[str, type]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and cls.__module__ == errors.__name__
    }


def _classes() -> dict[str, type]:
    """The exception tree (a warning class is said, not raised: no reason, no place in it)."""
    return {n: c for n, c in _declared().items() if issubclass(c, errors.CrawlerError)}


def test_every_class_is_an_error_or_a_documented_warning():
    doc = errors.__doc__ or ""
    others = {n: c for n, c in _declared().items() if n not in _classes()}
    assert all(issubclass(c, Warning) for c in others.values()), others
    assert [n for n in others if f"``{n}``" not in doc] == []
    used = _names_used_outside_errors()
    assert [n for n in others if n not in used] == [], "a warning nothing gives"


def _names_used_outside_errors() -> set[str]:
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                used.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return used


def test_every_error_class_is_in_the_documented_tree():
    doc = errors.__doc__ or ""
    missing = [
        name
        for name in _classes()
        if name != "CrawlerError" and f"── {name} " not in doc and f"``{name}``" not in doc
    ]
    assert not missing, f"not in errors.py's tree: {missing}"


def test_every_error_class_is_raised_or_built_somewhere():
    used = _names_used_outside_errors()
    unused = sorted(n for n in _classes() if n not in BASES and n not in used)
    assert not unused, f"never raised or built by the package: {unused}"


def test_every_error_has_its_own_reason():
    """Unless it refines a parent's (ConnectTimeout is a timeout: records keep saying so)."""
    own = [
        cls.reason
        for name, cls in _classes().items()
        if name not in BASES
        and all(cls.reason != getattr(base, "reason", None) for base in cls.__mro__[1:])
    ]
    assert len(own) == len(set(own)), own
