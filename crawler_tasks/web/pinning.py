"""The transport under every fetch: connections pinned to vetted addresses, under a deadline.

requests/urllib3 resolve the hostname again when they connect; the classes here make them
connect to the address :func:`.netguard.check_host` vetted instead (pinning), while ``host``
(Host header, TLS SNI, certificate verification) stays the URL's hostname, so a DNS answer that
changes between the check and the connection cannot smuggle in a private address. They also
hand every socket that carries a request to that request's :class:`Deadline`, which cuts it off
at the request's total deadline.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import certifi
from requests import PreparedRequest
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, PoolManager, ProxyManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from .deadline import Deadline
from .netguard import parse_address

if TYPE_CHECKING:
    from urllib3._base_connection import BaseHTTPConnection


class ConnectionContext(threading.local):
    """What the transport must know about the request running in this thread.

    Thread-local because one adapter (one pool) serves every thread of a worker process and
    urllib3 gives us no per-request hook below the adapter.
    """

    pinned_ip: str | None = None
    deadline: Deadline | None = None
    #: Called as each fetch begins, before its deadline runs and before it connects (not
    #: before a redirect hop): the host's send gate (the worker's politeness), which sleeps
    #: until the host's next send slot. Set for a task's duration by :meth:`Fetcher.gated`.
    gate: Callable[[], Callable[[], None] | None] | None = None
    #: What the gate returned: called once, just before the fetch's first request is written
    #: (a thread starved between its slot and the write would send late, close to the next).
    sending: Callable[[], None] | None = None

    def attach(self, sock: socket.socket) -> None:
        if self.deadline is not None:
            self.deadline.attach(sock)

    def forget(self) -> None:
        if self.deadline is not None:
            self.deadline.forget()

    def sent(self) -> None:
        if self.deadline is not None:
            self.deadline.sent()


class _PinnedHTTPConnection(HTTPConnection):
    _look: Callable[[], None] | None = None  #: the gate's look of the request being written

    def __init__(self, *args: Any, pinned_ip: str, context: ConnectionContext, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.pinned_ip = pinned_ip
        self._context = context

    def _new_conn(self) -> socket.socket:
        try:
            sock = create_connection(
                (self.pinned_ip, self.port),
                self.timeout,
                source_address=self.source_address,
                socket_options=self.socket_options,
            )
        except TimeoutError as exc:
            raise ConnectTimeoutError(self, f"connecting to {self.pinned_ip} timed out") from exc
        except OSError as exc:
            raise NewConnectionError(self, f"cannot connect to {self.pinned_ip}: {exc}") from exc
        self._context.attach(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # a kept-alive connection: _new_conn is not called again
            self._context.attach(self.sock)
            # Written under the timeout it reads with: urllib3 sets the connect timeout to
            # write and the read timeout back to read, two ioctls a request that each let the
            # GIL go (a _TLSSocket skips a timeout it has). The fetch's deadline bounds both.
            self.timeout = self.sock.gettimeout()
        self._look, self._context.sending = self._context.sending, None
        try:
            super().request(*args, **kwargs)
        finally:
            self._look = None  # a request that failed before its write takes it nowhere
        self._context.sent()

    def send(self, data: Any) -> None:
        # The gate's last look (``ConnectionContext.sending``) as close to the write as Python
        # gets: after the connection (http.client connects a plain one in its first send) and
        # the request's headers, each of which may lose the GIL for long on a busy machine (a
        # look before them let a request starved there go 0.23 s late, close to the next one).
        # Not a proxy tunnel's CONNECT, which connecting sends before the request begins.
        look, self._look = self._look, None
        if look is not None:
            if self.sock is None and self.auto_open:
                self.connect()
            look()
        super().send(data)


class _PinnedHTTPSConnection(_PinnedHTTPConnection, HTTPSConnection):
    pass


class _PinnedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _PinnedHTTPConnection
    #: time.monotonic() when a connection was last taken or given back (see close_idle;
    #: a pool never used yet is about to be)
    last_used = float("inf")

    def _get_conn(self, timeout: float | None = None) -> BaseHTTPConnection:
        self.last_used = time.monotonic()
        return super()._get_conn(timeout)

    def _put_conn(self, conn: BaseHTTPConnection | None) -> None:
        # Back in the pool a connection may serve another thread: the current fetch's deadline
        # must not cut it off any more.
        self.conn_kw["context"].forget()
        self.last_used = time.monotonic()
        super()._put_conn(conn)


class _PinnedHTTPSPool(_PinnedHTTPPool, HTTPSConnectionPool):
    ConnectionCls = _PinnedHTTPSConnection


class _PinningPoolManager(PoolManager):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_classes_by_scheme = {"http": _PinnedHTTPPool, "https": _PinnedHTTPSPool}

    def connection_from_context(self, request_context: dict[str, Any]) -> HTTPConnectionPool:
        pinned_ip = request_context.get("pinned_ip")
        if not pinned_ip:
            raise RuntimeError("refusing a connection to an address check_host did not vet")
        # One pool per (hostname, address): a kept-alive connection to the address a name had
        # before must not serve it once it resolves elsewhere.
        key_context = {
            k: v for k, v in request_context.items() if k not in ("pinned_ip", "context")
        }
        key_context["host"] = f"{request_context['host']}@{pinned_ip}"
        scheme = request_context["scheme"].lower()
        pool_key = self.key_fn_by_scheme[scheme](key_context)
        return self.connection_from_pool_key(pool_key, request_context=request_context)


class _PinnedProxyManager(ProxyManager):
    """A proxy manager whose connections (plain, or CONNECT tunnels) go to the proxy's vetted
    address only, with the request's deadline attached like any other connection."""

    def __init__(self, proxy_url: str, context: ConnectionContext, **kw: Any) -> None:
        super().__init__(proxy_url, **kw)
        self.pool_classes_by_scheme = {"http": _PinnedHTTPPool, "https": _PinnedHTTPSPool}
        host = self.proxy.host if self.proxy is not None else None
        if host is None or parse_address(host) is None:
            raise RuntimeError("refusing a proxy whose address check_host did not vet")
        self._pin = {"pinned_ip": host.strip("[]"), "context": context}

    def connection_from_context(self, request_context: dict[str, Any]) -> HTTPConnectionPool:
        scheme = request_context["scheme"].lower()
        pool_key = self.key_fn_by_scheme[scheme](request_context)
        return self.connection_from_pool_key(
            pool_key, request_context={**request_context, **self._pin}
        )


class _TLSSocket(ssl.SSLSocket):
    """A TLS socket whose ``settimeout`` to the timeout it has already does nothing. urllib3
    sets a connection's timeout twice a request (as it writes the request, as it reads the
    response), the same each time on a kept connection, and each call is an ioctl that lets
    the GIL go to another of the process's threads (issue 32)."""

    def settimeout(self, value: float | None) -> None:
        if value != self.gettimeout():
            super().settimeout(value)


def tls_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """The one client TLS context of a fetcher: certifi's CAs, plus ``ca_bundle``'s (a PEM
    file of private CAs) when given. Shared by every connection: urllib3 otherwise builds a
    context and loads certifi's ~150 CAs again for each new connection (~5-12 ms of CPU)."""
    context = ssl.create_default_context(cafile=certifi.where())
    context.sslsocket_class = _TLSSocket
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    return context


#: Connections kept per host (at one address): its concurrency seldom exceeds it; beyond,
#: a connection is closed after use instead of kept.
POOL_MAXSIZE = 16


class PinnedAdapter(HTTPAdapter):
    """A requests adapter that only connects to ``context.pinned_ip`` (refuses when unset)
    and verifies certificates against ``ssl_context`` (always: see :meth:`cert_verify`)."""

    def __init__(
        self,
        context: ConnectionContext,
        pools: int,
        ssl_context: ssl.SSLContext,
        idle_seconds: float = 30.0,
    ) -> None:
        self._context = context  # before super().__init__(), which calls init_poolmanager()
        self._ssl_context, self._idle = ssl_context, idle_seconds
        self._swept, self._sweeping = time.monotonic(), threading.Lock()
        # A pool per host (at one address), ``pools`` of them: the hosts a process fetches
        # from lately, each with the connections its concurrency needs (POOL_MAXSIZE).
        super().__init__(pool_connections=pools, pool_maxsize=POOL_MAXSIZE, max_retries=0)

    def close_idle(self) -> None:
        """Close the pools (and their connections) of hosts not used for ``idle_seconds``;
        looked at every quarter of that, by whichever fetch comes then."""
        now = time.monotonic()
        if now - self._swept < self._idle / 4 or not self._sweeping.acquire(blocking=False):
            return
        try:
            self._swept = now
            pools = self.poolmanager.pools
            # Read under the container's lock without get(), which would reorder its LRU.
            with pools.lock:
                idle = [
                    key
                    for key, pool in pools._container.items()
                    if now - getattr(pool, "last_used", now) > self._idle
                ]
            for key in idle:
                with contextlib.suppress(KeyError):
                    del pools[key]  # closes its idle connections; a busy one on return
        finally:
            self._sweeping.release()

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        # requests would point every pool at certifi's file (ca_certs), which makes urllib3
        # load it into the shared context again on each connection: the CAs are in it.
        conn.cert_reqs = "CERT_REQUIRED"
        conn.ca_certs = conn.ca_cert_dir = None

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self._pool_connections, self._pool_maxsize, self._pool_block = connections, maxsize, block
        self.poolmanager = _PinningPoolManager(
            num_pools=connections,
            maxsize=maxsize,
            block=block,
            context=self._context,
            ssl_context=self._ssl_context,
            **pool_kwargs,
        )

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> ProxyManager:
        if proxy not in self.proxy_manager:
            self.proxy_manager[proxy] = _PinnedProxyManager(
                proxy,
                self._context,
                proxy_headers=self.proxy_headers(proxy),
                num_pools=self._pool_connections,
                maxsize=self._pool_maxsize,
                block=self._pool_block,
                ssl_context=self._ssl_context,
                **proxy_kwargs,
            )
        return cast(ProxyManager, self.proxy_manager[proxy])

    def get_connection_with_tls_context(
        self,
        request: PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: tuple[str, str] | str | None = None,
    ) -> ConnectionPool:
        if proxies and select_proxy(request.url or "", proxies):
            # Through a proxy (its address already vetted and written into its URL): the
            # connection goes to that address (_PinnedProxyManager).
            return super().get_connection_with_tls_context(request, verify, proxies, cert)
        host_params, tls_kwargs = self.build_connection_pool_key_attributes(
            request, True if verify is None else verify, cert
        )
        pool_kwargs: dict[str, Any] = {**tls_kwargs, "pinned_ip": self._context.pinned_ip}
        return self.poolmanager.connection_from_host(**host_params, pool_kwargs=pool_kwargs)
