"""A crawl's own request settings (headers, cookies, basic auth, proxy) turned into what the
fetcher sends, in the worker, at the moment of the request.

Secrets never travel: options hold references ``env:NAME`` to environment variables of the
workers (task messages, Redis, logs and output only ever see the reference); the value is read
here, per request, and a worker without the variable fails the URL with ``missing_secret``
(naming the variable, never a value). Cookies and basic auth are per host (exact host name,
lower case) and go only to that host, also when a redirect leads elsewhere.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping

from ..errors import MissingSecret
from ..state.options import CrawlOptions

ENV = "env:"


def value_of(ref: str) -> str:
    """``ref`` itself, or the worker's environment variable it names (``env:NAME``)."""
    if not ref.startswith(ENV):
        return ref
    name = ref[len(ENV) :]
    value = os.environ.get(name)
    if value is None:
        raise MissingSecret(f"environment variable {name} is not set on this worker")
    return value


def headers(opts: CrawlOptions) -> dict[str, str]:
    """The crawl's extra headers for every request (values resolved)."""
    return {name: value_of(v) for name, v in opts.headers.items()}


def host_headers(opts: CrawlOptions) -> Callable[[str], Mapping[str, str]] | None:
    """Authorization and Cookie for one host, or None for a crawl with neither."""
    if not (opts.auth or opts.cookies):
        return None

    def for_host(host: str) -> Mapping[str, str]:
        out = {}
        host = host.lower()
        if host in opts.auth:
            token = base64.b64encode(value_of(opts.auth[host]).encode()).decode()
            out["Authorization"] = f"Basic {token}"
        jar = opts.cookies.get(host)
        if jar:
            out["Cookie"] = "; ".join(f"{k}={value_of(v)}" for k, v in jar.items())
        return out

    return for_host


def proxy(opts: CrawlOptions) -> str | None:
    return value_of(opts.proxy) if opts.proxy else None


def recorded_headers(opts: CrawlOptions, agent: str) -> list[tuple[str, str]]:
    """Request headers as the WARC records them: the user agent and the literal headers;
    headers from the environment (secrets), auth and cookies are left out."""
    literal = [(k, v) for k, v in opts.headers.items() if not v.startswith(ENV)]
    return [("User-Agent", agent), *literal]
