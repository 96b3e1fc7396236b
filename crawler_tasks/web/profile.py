"""How one crawl's requests are made, as one frozen value built from its options.

A :class:`RequestProfile` is both the arguments of every request of the crawl
(:meth:`RequestProfile.fetch_args`) and the key of the robots.txt cache the crawl shares with
the crawls that request the same way (a robots.txt read with other headers, another proxy or
address policy may say something else). An option that changes how a crawl fetches is a field
here, set in :meth:`RequestProfile.build` and used by the fetcher: declared in
``state/options.py``, nothing else to change.

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
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import MissingSecret

ENV = "env:"

Pairs = tuple[tuple[str, str], ...]


class RequestOptions(Protocol):
    """The crawl options a profile is built from (``state.options.CrawlOptions``)."""

    @property
    def allow_private_networks(self) -> bool: ...

    @property
    def user_agent(self) -> str: ...

    @property
    def headers(self) -> dict[str, str]: ...

    @property
    def cookies(self) -> dict[str, dict[str, str]]: ...

    @property
    def auth(self) -> dict[str, str]: ...

    @property
    def proxy(self) -> str | None: ...

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def max_redirects(self) -> int: ...

    @property
    def timeout(self) -> float: ...


@dataclass(frozen=True)
class RequestProfile:
    """A crawl's requests: address policy, headers (references unresolved), per-host auth
    and cookies, proxy and limits. Hashable, and holds no secret."""

    allow_private: bool = False
    user_agent: str = ""
    headers: Pairs = ()
    auth: Pairs = ()
    cookies: tuple[tuple[str, Pairs], ...] = ()
    proxy: str | None = None
    max_body_bytes: int | None = None
    max_redirects: int | None = None
    #: Seconds one request may take, every redirect hop (None: the fetcher's own).
    timeout: float | None = None

    @classmethod
    def build(cls, opts: RequestOptions, default_agent: str) -> RequestProfile:
        return cls(
            allow_private=opts.allow_private_networks,
            user_agent=opts.user_agent or default_agent,
            headers=_pairs(opts.headers),
            auth=_pairs(opts.auth),
            cookies=tuple(sorted((host, _pairs(jar)) for host, jar in opts.cookies.items())),
            proxy=opts.proxy,
            max_body_bytes=opts.max_body_bytes,
            max_redirects=opts.max_redirects,
            timeout=opts.timeout,
        )

    def fetch_args(self, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``Fetcher.get``'s keyword arguments for a page (``extra``: validators), but
        ``follow``, which is the page's (its redirect claims)."""
        headers = self.request_headers(extra or {})  # first: its secrets are named first
        return {
            **self._route(),
            "headers": headers,
            "max_body_bytes": self.max_body_bytes,
            "max_redirects": self.max_redirects,
            "timeout": self.timeout,
        }

    def robots_args(self) -> dict[str, Any]:
        """The same for robots.txt: the fetcher's own limits, no redirect followed."""
        headers = self.request_headers({})
        return {
            **self._route(),
            "headers": headers,
            "follow": lambda _target: "manual",
        }

    def _route(self) -> dict[str, Any]:
        return {
            "allow_private": self.allow_private,
            "host_headers": self.host_headers(),
            "proxy": value_of(self.proxy) if self.proxy else None,
        }

    def request_headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The crawl's headers for every request (values resolved), its User-Agent, ``extra``."""
        own = {name: value_of(v) for name, v in self.headers}
        return {**own, "User-Agent": self.user_agent, **extra}

    def host_headers(self) -> Callable[[str], Mapping[str, str]] | None:
        """Authorization and Cookie for one host, or None for a crawl with neither."""
        if not (self.auth or self.cookies):
            return None
        auth, cookies = dict(self.auth), dict(self.cookies)

        def for_host(host: str) -> Mapping[str, str]:
            out = {}
            host = host.lower()
            if host in auth:
                token = base64.b64encode(value_of(auth[host]).encode()).decode()
                out["Authorization"] = f"Basic {token}"
            jar = cookies.get(host)
            if jar:
                out["Cookie"] = "; ".join(f"{k}={value_of(v)}" for k, v in jar)
            return out

        return for_host

    def recorded_headers(self) -> list[tuple[str, str]]:
        """Request headers as the WARC records them: the user agent and the literal headers;
        headers from the environment (secrets), auth and cookies are left out."""
        literal = [(k, v) for k, v in self.headers if not v.startswith(ENV)]
        return [("User-Agent", self.user_agent), *literal]


def _pairs(mapping: Mapping[str, str]) -> Pairs:
    return tuple(mapping.items())


def value_of(ref: str) -> str:
    """``ref`` itself, or the worker's environment variable it names (``env:NAME``)."""
    if not ref.startswith(ENV):
        return ref
    name = ref[len(ENV) :]
    value = os.environ.get(name)
    if value is None:
        raise MissingSecret(f"environment variable {name} is not set on this worker")
    return value
