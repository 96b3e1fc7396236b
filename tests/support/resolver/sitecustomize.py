"""Test-only host names for worker processes: put this directory on PYTHONPATH and name
``TEST_RESOLVER_HOSTS="name=address,..."``. Python imports ``sitecustomize`` at start-up, so
``socket.getaddrinfo`` (the resolver the fetcher's guard calls) answers those names with those
addresses in that process; every other name resolves as usual. The crawler itself is untouched:
it resolves, vets and connects as it would for a name in DNS or /etc/hosts."""

from __future__ import annotations

import os
import socket
from typing import Any

_HOSTS = dict(
    item.split("=", 1) for item in os.environ.get("TEST_RESOLVER_HOSTS", "").split(",") if item
)
_real_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    return _real_getaddrinfo(_HOSTS.get(name, host), port, *args, **kwargs)


if _HOSTS:
    socket.getaddrinfo = _getaddrinfo
