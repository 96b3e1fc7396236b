"""Reading settings from the environment: ``CRAWLER_`` + a setting's name in upper case.

The variable of a setting is derived from its one declaration in settings.py, never written
a second time; its text is read as the type of the setting's default. What is read is
checked before anything starts (its range, the CA bundle, the key prefix): a bad value is one
line naming the variable, the value and why.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

from .limits import INFINITE_OK, number, range_problem

ENV_PREFIX = "CRAWLER_"


def variable(name: str) -> str:
    """``default_rate`` -> ``CRAWLER_DEFAULT_RATE``."""
    return ENV_PREFIX + name.upper()


#: CRAWLER_* variables read that are not settings: fault injection (worker/process/faults.py).
OTHER_VARIABLES = frozenset({"CRAWLER_FAULT_POINT"})


def unknown_variables(declared: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """A warning for each ``CRAWLER_*`` variable in ``env`` that names no setting, with the
    nearest one it may have meant: ``CRAWLER_DEFAULT_RAET=5`` was ignored without a word (and
    a misspelt ``CRAWLER_BROKER_URl`` sent commands to someone else's Redis)."""
    known = {variable(name) for name in declared} | OTHER_VARIABLES
    warnings = []
    for name in sorted(n for n in env if n.startswith(ENV_PREFIX) and n not in known):
        near = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.8)
        meant = f" (did you mean {near[0]}?)" if near else ""
        warnings.append(f"warning: {name} is not a crawler setting: ignored{meant}")
    return warnings


def read_settings(
    declared: Iterable[dataclasses.Field[Any]], env: Mapping[str, str]
) -> dict[str, Any]:
    """The value of each declared setting whose variable is set (and not empty) in ``env``,
    as the type of its default."""
    values: dict[str, Any] = {}
    for f in declared:
        raw = env.get(variable(f.name))
        if raw is not None and raw != "":
            default = f.default if f.default is not dataclasses.MISSING else None
            try:
                values[f.name] = _coerce(raw, default)
            except ValueError as exc:
                raise ValueError(f"{variable(f.name)}={raw!r}: {exc}") from None
    return values


def _coerce(raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return number(raw)
    return raw


def check_settings(
    values: Mapping[str, Any], limits: Mapping[str, tuple[float, float]], prefix: str
) -> None:
    """Raise ValueError, naming the variable, for the first value out of its range, a CA bundle
    that cannot be used, or a key ``prefix`` Redis Cluster would misread."""
    for name, value in values.items():
        low, high = limits.get(name, (-math.inf, math.inf))
        why = name in limits and range_problem(name, value, low, high, name in INFINITE_OK)
        if why:
            raise ValueError(f"{variable(name)}={value!r}: {why}")
    if values.get("ca_bundle"):
        _check_ca_bundle(values["ca_bundle"])
    if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
        # Braces would become the Redis Cluster hash tag instead of the crawl id.
        raise ValueError(f"{ENV_PREFIX}KEY_PREFIX={prefix!r}: use letters, digits, '.', '_', '-'")


def _check_ca_bundle(path: str) -> None:
    """A CA bundle that cannot be used stops the process that reads it, before it writes
    anything: a crawl that trusted nothing of it would fail every page of the intranet."""
    try:
        ssl.create_default_context(cafile=path)
    except FileNotFoundError:
        raise ValueError(f"{ENV_PREFIX}CA_BUNDLE={path!r}: no such file") from None
    except (OSError, ssl.SSLError) as exc:
        # SSLError: not PEM, or no certificate in it ("no certificate or crl found").
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"{ENV_PREFIX}CA_BUNDLE={path!r}: not a PEM file of CAs ({why})") from None
