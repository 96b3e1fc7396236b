"""The ranges of numbers a user gives: settings, crawl options, rates and periods.

A numeric setting is declared with its range beside its default (:func:`limited`, in
settings.py); a crawl option that takes its default from a setting is held to the same range
(state/options.py); both are checked by one rule, :func:`range_problem`, whose message names
the value, the range and what was given. The docs list them (docs/operations/limits.md,
and the generated reference of options and settings).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

DAY = 86400

#: Settings for which inf is a value (a rate: no limit).
INFINITE_OK = frozenset({"default_rate"})


def limited(default: Any, low: float, high: float) -> Any:
    """A numeric setting's default and its range, (lowest, highest), both allowed: past either,
    a value is a typo or a unit mistake (milliseconds for seconds, a rate of 1e400), refused
    by :func:`~crawler_tasks.settings.load` before anything starts; a crawl option that takes
    its default from a setting is held to the same range (state/options.py). The docs list
    them. Floors are low (tests run with 2-s timeouts) but never 0 where 0 would hang or
    spin."""
    return dataclasses.field(default=default, metadata={"limits": (low, high)})


def limits_of(declaration: type) -> dict[str, tuple[float, float]]:
    """The range of every field of a dataclass declared with :func:`limited`."""
    return {
        f.name: f.metadata["limits"]
        for f in dataclasses.fields(declaration)  # type: ignore[arg-type]
        if "limits" in f.metadata
    }


def range_problem(
    name: str, value: Any, low: float, high: float, infinite_ok: bool = False
) -> str | None:
    """Why ``value`` is not a number of ``name`` in ``[low, high]`` (``inf`` too, if
    ``infinite_ok``), or None. One rule for settings, crawl options, rates and periods."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} must be a number, not {value!r}"
    if math.isinf(value) and value > 0 and infinite_ok:
        return None
    if math.isnan(value) or not low <= value <= high:
        more = " (or inf: no limit)" if infinite_ok else ""
        return f"{name} must be between {_plain(low)} and {_plain(high)}{more}, not {value!r}"
    return None


def _plain(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def number(text: str) -> float:
    """``float(text)``, except that only "inf" spells infinity: ``1e400`` overflows to inf in
    Python, which a rate would take as "no limit"."""
    value = float(text)
    if math.isinf(value) and text.strip().lstrip("+-").lower() not in ("inf", "infinity"):
        raise ValueError(f"{text.strip()!r} is too large a number (inf, if no limit is meant)")
    return value
