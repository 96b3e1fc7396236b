"""Who may use the dashboard, and how its answers are written: checks and formats without
Tornado, shared by the command (surface/dashboard.py) and the handlers
(surface/dashboard_views.py), so neither imports the other."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from importlib import resources
from typing import Any

from .cli_common import replace_non_finite

#: Hosts a request may name when the dashboard runs without auth (DNS rebinding).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def loopback_name(host: str) -> bool:
    """A Host header naming this machine only (a rebound name is not one)."""
    host = host.lower()
    return host in LOOPBACK_NAMES or host.startswith("127.") or host == "::1"


def authorized(header: str | None, auth: str) -> bool:
    """An ``Authorization: Basic ...`` header naming ``auth`` (compared in constant time)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, auth.encode())


def static_dir() -> str:
    return str(resources.files("crawler_tasks.surface").joinpath("dashboard_static"))


def dumps(value: Any) -> str:
    """JSON as the API sends it: infinities (a host with no limit) and NaN as null."""
    return json.dumps(replace_non_finite(value, lambda _: None), default=str)
