"""HTTP fetching: one GET with our own redirect handling, an SSRF guard, and hard limits.

A worker process creates one :class:`Fetcher` and shares it between its threads; its
connections (one pooled ``requests.Session``, pinned to vetted addresses) are its
:class:`~.transport.Transport`'s, which sends each hop. The Fetcher decides what a call does
with the answers: redirects, limits, the deadline and errors. :meth:`Fetcher.get` returns a
:class:`Response` for every HTTP status and raises the exceptions of :mod:`crawler_tasks.errors`
for everything else.

Limits, all enforced whatever the server does:

* ``total_timeout`` covers the whole call (every redirect hop, headers to last byte): a timer
  thread shuts the socket down at the deadline, which wakes a ``recv`` blocked in the fetching
  thread, so a server trickling one byte a second cannot hold a worker (no signals: this works
  in Celery's thread pool);
* the body is streamed and decoded (gzip/deflate, br when a brotli module is installed) in
  bounded steps and cut at ``max_body_bytes`` *decoded* bytes, so neither an endless body nor a
  decompression bomb costs more than about ``max_body_bytes`` of memory (:mod:`.body`); a
  gzip or deflate body is also kept as received, for the WARC (``Response.wire``);
* every hop's host is resolved (answers kept ``dns_seconds``) and vetted by
  :func:`.netguard.check_host` and the connection pinned to a vetted address (see that module
  and :mod:`.pinning`); a redirect to a forbidden IP literal (``169.254.169.254``) fails with
  ``BlockedAddress`` before ``follow`` or the network see it.

Every :class:`~crawler_tasks.errors.CrawlerError` raised carries ``details["redirects"]`` (the
hops followed so far) and ``details["final_url"]`` (the URL being fetched when it failed).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from http.client import HTTPException
from typing import cast
from urllib.parse import urljoin

import requests
from urllib3.exceptions import HTTPError
from urllib3.response import HTTPResponse

from ..errors import (
    ConnectionFailed,
    CrawlerError,
    FetchTimeout,
    InvalidURL,
    TooLarge,
    TooManyRedirects,
)
from ..settings import Settings
from . import netguard
from .body import Response as Response  # defined beside the reading of its body
from .body import (
    content_length,
    discard,
    http_version,
    media_type,
    read_body,
    redirect_location,
)
from .deadline import Deadline
from .failures import translate
from .transport import Chain, Transport, host_port, require_http
from .urls import normalize


class Fetcher:
    """GETs URLs for one worker process; thread-safe. Create once, :meth:`close` at exit."""

    def __init__(
        self,
        *,
        user_agent: str,
        connect_timeout: float,
        read_timeout: float,
        total_timeout: float,
        max_body_bytes: int,
        max_redirects: int,
        pools: int = 1024,
        idle_seconds: float = 30.0,
        ca_bundle: str | None = None,
        dns_seconds: float = 0.0,
    ) -> None:
        self._total_timeout = total_timeout
        self._max_body_bytes = max_body_bytes
        self._max_redirects = max_redirects
        #: The connections: sends one GET of a hop to a vetted address (transport.py).
        self.transport = Transport(
            user_agent=user_agent,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            pools=pools,
            idle_seconds=idle_seconds,
            ca_bundle=ca_bundle,
            dns_seconds=dns_seconds,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Fetcher:
        return cls(
            user_agent=settings.user_agent,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            total_timeout=settings.total_timeout,
            max_body_bytes=settings.max_body_bytes,
            max_redirects=settings.max_redirects,
            pools=settings.connection_pools,
            idle_seconds=settings.connection_idle,
            ca_bundle=settings.ca_bundle or None,
            dns_seconds=settings.dns_cache_seconds,
        )

    def close(self) -> None:
        self.transport.close()

    @contextlib.contextmanager
    def gated(self, gate: Callable[[], Callable[[], None] | None]) -> Iterator[None]:
        """In the block, each fetch this thread begins (robots.txt, a page; not a redirect hop)
        first calls ``gate``, the host's send gate (sleeps until its slot; may return a look
        to take just before the write, pinning.py)."""
        self.transport.context.gate = gate
        try:
            yield
        finally:
            self.transport.context.gate = None

    def get(
        self,
        url: str,
        *,
        allow_private: bool = False,
        headers: Mapping[str, str] | None = None,
        follow: Callable[[str], str | None] | None = None,
        max_body_bytes: int | None = None,
        max_redirects: int | None = None,
        host_headers: Callable[[str], Mapping[str, str]] | None = None,
        proxy: str | None = None,
        timeout: float | None = None,
    ) -> Response:
        """GET ``url``, following redirects (each hop vetted by ``follow`` and the guard).
        ``headers`` (a crawl's User-Agent, validators) replace the session's; the limits, when
        given, replace the fetcher's for this request (they belong to the crawl).
        ``host_headers(host)`` adds headers for one hop's host only (a crawl's basic auth and
        cookies: never sent to another host a redirect leads to). Through ``proxy``
        (``http://[user:pass@]host:port``), the connection goes to the proxy's address, vetted
        like any host; the target's address is vetted as resolved here.

        Raises FetchTimeout, ConnectionFailed (ConnectTimeout and ConnectFailed when no
        connection was made: errors.Unreachable), BlockedAddress, UnsupportedScheme,
        TooManyRedirects, TooLarge, BadEncoding or InvalidURL.
        """
        gate = self.transport.context.gate
        if gate is not None:  # before the deadline runs: waiting for a slot is not fetching
            self.transport.context.gate = None  # a fetch inside ``follow`` is another host's
            self.transport.context.sending = (
                gate()
            )  # what the gate asks again just before the write
            self.transport.context.gate = gate  # (an exception leaves the block: gated() clears it)
        total = self._total_timeout if timeout is None else timeout  # the crawl's, if given
        chain = Chain(url, allow_private, headers, follow, Deadline(total))
        chain.max_body_bytes = max_body_bytes or self._max_body_bytes
        chain.max_redirects = self._max_redirects if max_redirects is None else max_redirects
        chain.host_headers, chain.proxy = host_headers, proxy
        # Saved and restored: a ``follow`` callback may itself fetch (in this same thread).
        outer = (self.transport.context.deadline, self.transport.context.pinned_ip)
        self.transport.context.deadline = chain.deadline
        try:
            try:
                return self._get(chain)
            except ConnectionFailed:
                if chain.deadline.expired:
                    raise FetchTimeout("total deadline exceeded") from None
                raise
            except (requests.RequestException, HTTPError, HTTPException, OSError) as exc:
                raise translate(exc, chain.deadline.expired) from exc
        except CrawlerError as exc:
            exc.details.setdefault("redirects", list(chain.redirects))
            exc.details.setdefault("final_url", chain.current)
            raise
        finally:
            chain.deadline.finish()
            (
                self.transport.context.deadline,
                self.transport.context.pinned_ip,
                self.transport.context.sending,
            ) = (*outer, None)

    def _get(self, chain: Chain) -> Response:
        require_http(chain.url)
        chain.visited.add(normalize(chain.url))
        while True:
            resp = self.transport.request(chain)
            if chain.answered_at is None:
                chain.answered_at = time.monotonic()
            try:
                location = redirect_location(resp)
                if location is None:
                    return self._read(chain, resp)
                target = self._next_hop(chain, resp.status_code, location)
                reason = chain.follow(target) if chain.follow is not None else None
                if reason is not None:
                    return self._read(chain, resp, stop_reason=reason)
                discard(resp)
            except BaseException:
                resp.close()  # unread body: the connection cannot be reused
                raise
            chain.visited.add(target)
            chain.current = target

    def _next_hop(self, chain: Chain, status: int, location: str) -> str:
        try:
            target = urljoin(chain.current, location)
        except ValueError as exc:
            raise InvalidURL(f"bad redirect location {location!r}: {exc}") from None
        require_http(target, redirects=[*chain.redirects, (status, target)])
        target = normalize(target)
        chain.redirects.append((status, target))
        # No DNS here: names are vetted when connected to. A literal is judged at once, so a
        # redirect to the metadata endpoint is "blocked", not "out of scope", in the record.
        netguard.check_literal(host_port(target)[0], allow_private=chain.allow_private)
        if target in chain.visited:
            raise TooManyRedirects(f"redirect loop at {target}", redirects=chain.redirects)
        if len(chain.redirects) > chain.max_redirects:
            raise TooManyRedirects(
                f"more than {chain.max_redirects} redirects", redirects=chain.redirects
            )
        return target

    def _read(
        self, chain: Chain, resp: requests.Response, stop_reason: str | None = None
    ) -> Response:
        raw = cast(HTTPResponse, resp.raw)
        length = content_length(raw)
        if length is not None and length > chain.max_body_bytes:
            raise TooLarge(
                f"Content-Length {length} above {chain.max_body_bytes}",
                content_length=length,
                status=resp.status_code,
                content_type=media_type(raw.headers.get("content-type")),
            )
        body = read_body(raw, chain.max_body_bytes, chain.deadline)
        if body.truncated:
            resp.close()
        else:
            raw.release_conn()
        return Response(
            url=chain.url,
            final_url=chain.current,
            status=resp.status_code,
            headers={k.lower(): v for k, v in raw.headers.items()},
            content_type=media_type(raw.headers.get("content-type")),
            body=body.data,
            truncated=body.truncated,
            redirects=chain.redirects,
            elapsed=time.monotonic() - chain.started,
            ip=chain.ip,
            raw_headers=list(raw.headers.iteritems()),
            http_version=http_version(raw),
            stop_reason=stop_reason,
            sent_at=chain.deadline.sent_at,
            latency=_latency(chain),
            wire=body.wire,
        )


def _latency(chain: Chain) -> float | None:
    sent, answered = chain.deadline.sent_at, chain.answered_at
    return None if sent is None or answered is None else max(0.0, answered - sent)
