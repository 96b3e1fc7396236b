"""A host name and a requests/s figure as an operator types them (``crawler set-rate``,
``set-ceiling``, the dashboard's rate controls): checked here, without a CLI, so that every
place that takes them refuses the same inputs with the same words."""

from __future__ import annotations

import contextlib
import ipaddress
import math

from ..errors import ConfigError, InvalidURL
from .urls import host_of, normalize


def host_name(text: str, what: str = "host") -> str:
    """A politeness domain as buckets are keyed: a host name or IP address, no URL, no port."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.IPv6Address(text.strip("[]")))
    if any(c in text for c in "/@:?# ") or not text:
        hint = ""
        with contextlib.suppress(InvalidURL, ValueError):
            hint = f" (here: {host_of(normalize(text))})"
        raise ConfigError(f"{what} {text!r}: give a host name, not a URL or host:port{hint}")
    try:
        return host_of(normalize(f"http://{text}/"))
    except InvalidURL as exc:
        raise ConfigError(f"{what} {text!r}: not a host name: {exc}") from None


def rate_value(text: str) -> float | None:
    """'default' -> None, 'inf' -> no limit, else finite requests/s > 0 (``1e400``, which
    float() reads as infinity, is refused rather than taken as "no limit")."""
    text = text.strip()
    if text == "default":
        return None
    if text.lower() == "inf":
        return math.inf
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"rate {text!r}: expected requests/s (> 0), inf or default") from None
    if not 0 < rate < math.inf:
        raise ConfigError(f"rate {text!r}: must be > 0 requests/s (inf: no limit; default: remove)")
    return rate
