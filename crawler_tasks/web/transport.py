"""HTTP transport: one worker process's connections, and one GET sent over them.

A :class:`Transport` holds one pooled ``requests.Session`` whose adapter pins each connection
to an address :mod:`.netguard` vetted (:mod:`.pinning`), with the process's CA bundle and its
kept DNS answers. :meth:`Transport.request` sends the GET of one hop of a :class:`Chain` to
an address of its host (the next one if a connection cannot be made), through the crawl's
proxy if it has one, and returns the response with its body unread. What to do with the
response (redirects, limits, the deadline, errors) is :mod:`.fetcher`'s.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

import requests
from requests.cookies import RequestsCookieJar
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import ClosedPoolError

from ..errors import InvalidURL, UnsupportedScheme
from . import netguard
from .deadline import Deadline
from .failures import is_connect_failure
from .pinning import ConnectionContext, PinnedAdapter, tls_context

DEFAULT_PORTS = {"http": 80, "https": 443}


class Transport:
    """The connections of one worker process; thread-safe (each thread's fetch state is in
    :attr:`context`, thread-local)."""

    def __init__(
        self,
        *,
        user_agent: str,
        connect_timeout: float,
        read_timeout: float,
        pools: int,
        idle_seconds: float,
        ca_bundle: str | None,
        dns_seconds: float,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self.context = ConnectionContext()
        self.addresses = netguard.KeptAddresses(dns_seconds)
        #: Given to every request: empty for good (the crawl's cookies are headers, per host,
        #: see profile.py; nothing writes to it).
        self._no_cookies = RequestsCookieJar()
        self.session = requests.Session()
        # Proxies from the environment would bypass the address guard; .netrc is none of ours.
        self.session.trust_env = False
        self.session.headers.update(
            {"User-Agent": user_agent, "Accept-Encoding": accept_encoding()}
        )
        # ca_bundle: a private CA's PEM file, trusted beside certifi's (settings.ca_bundle)
        adapter = PinnedAdapter(self.context, pools, tls_context(ca_bundle), idle_seconds)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        self.session.close()

    def request(self, chain: Chain) -> requests.Response:
        """Send one GET for ``chain.current`` to a vetted address of its host."""
        try:
            headers = CaseInsensitiveDict(self.session.headers)
            headers.update(chain.headers or {})
            if chain.host_headers is not None:
                headers.update(chain.host_headers(host_port(chain.current)[0]))
            # Not Session.prepare_request: merging the session's settings and cookie jar cost
            # twice what the request itself does, and there is nothing to merge (no cookies:
            # the adapter is called directly, so no response ever fills the session's jar).
            prepared = requests.PreparedRequest()
            prepared.prepare(
                method="GET", url=chain.current, headers=headers, cookies=self._no_cookies
            )
        except (requests.RequestException, ValueError) as exc:
            raise InvalidURL(f"cannot request {chain.current!r}: {exc}") from None
        host, port = host_port(prepared.url or chain.current)
        addresses = self.addresses.check(host, port, allow_private=chain.allow_private)
        if chain.proxy is not None:
            return self._send(chain, prepared, addresses[0], pinned_proxy(chain))
        for ip in addresses[:-1]:
            try:
                return self._send(chain, prepared, ip)
            except requests.ConnectionError as exc:
                if not is_connect_failure(exc):
                    raise
        return self._send(chain, prepared, addresses[-1])

    def _send(
        self, chain: Chain, prepared: requests.PreparedRequest, ip: str, proxy: str = ""
    ) -> requests.Response:
        chain.deadline.check()
        remaining = chain.deadline.remaining()
        chain.ip = self.context.pinned_ip = ip
        timeout = (min(self._connect_timeout, remaining), min(self._read_timeout, remaining))
        # The adapter, not Session.send: with allow_redirects=False the session still builds
        # the next hop and reads the whole redirect body (unbounded) to do so.
        adapter = cast(PinnedAdapter, self.session.get_adapter(prepared.url or ""))
        adapter.close_idle()
        proxies = {"http": proxy, "https": proxy} if proxy else {}
        try:
            return adapter.send(
                prepared, stream=True, timeout=timeout, verify=True, proxies=proxies
            )
        except requests.ConnectionError as exc:
            if not (exc.args and isinstance(exc.args[0], ClosedPoolError)):
                raise
        # The host's pool was closed as idle (close_idle) between taking it and using it:
        # nothing was sent; this send takes a new pool.
        return adapter.send(prepared, stream=True, timeout=timeout, verify=True, proxies=proxies)


@dataclass
class Chain:
    """The state of one :meth:`~.fetcher.Fetcher.get` call across its redirect hops."""

    url: str
    allow_private: bool
    headers: Mapping[str, str] | None
    follow: Callable[[str], str | None] | None
    deadline: Deadline
    started: float = field(default_factory=time.monotonic)
    current: str = ""  #: the URL being fetched
    ip: str | None = None  #: the address it is fetched from
    answered_at: float | None = None  #: time.monotonic() at the first response's headers
    visited: set[str] = field(default_factory=set)
    redirects: list[tuple[int, str]] = field(default_factory=list)
    max_body_bytes: int = 0
    max_redirects: int = 0
    host_headers: Callable[[str], Mapping[str, str]] | None = None
    proxy: str | None = None

    def __post_init__(self) -> None:
        self.current = self.url
        self.visited.add(self.url)


def pinned_proxy(chain: Chain) -> str:
    """The chain's proxy URL with its host replaced by the address the guard vetted."""
    parts = urlsplit(chain.proxy or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidURL("the crawl's proxy is not an http(s)://host:port URL")
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    ip = netguard.check_host(parts.hostname, port, allow_private=chain.allow_private)[0]
    userinfo = parts.netloc.rpartition("@")[0]
    host = f"[{ip}]" if ":" in ip else ip
    return f"{parts.scheme}://{userinfo + '@' if userinfo else ''}{host}:{port}"


def require_http(url: str, **details: object) -> None:
    scheme = url.partition(":")[0].strip().lower() if ":" in url else ""
    if scheme not in DEFAULT_PORTS:
        raise UnsupportedScheme(f"not an http(s) URL: {url[:200]!r}", url=url, **details)


def host_port(url: str) -> tuple[str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS[parts.scheme.lower()]
    except (ValueError, KeyError) as exc:
        raise InvalidURL(f"bad URL {url!r}: {exc}") from None
    if not parts.hostname:
        raise InvalidURL(f"no host in {url!r}")
    return parts.hostname, port


def accept_encoding() -> str:
    # urllib3 decodes br only with one of these installed; never ask for what we cannot decode.
    has_brotli = any(importlib.util.find_spec(m) for m in ("brotli", "brotlicffi"))
    return "gzip, deflate, br" if has_brotli else "gzip, deflate"
