"""Which crawler error a transport failure is (requests', urllib3's, the socket's, OpenSSL's).

Failing to connect at all is what a host outage looks like (errors.Unreachable: the host's
circuit breaker counts it); a reset or a slow read after connecting is the URL's own problem;
a TLS handshake the server's certificate (or the lack of TLS) fails is named as such
(``tls_error: certificate verify failed: unable to get local issuer certificate``) and not
retried.
"""

from __future__ import annotations

import os
import re
import ssl
from typing import Any

import requests
from urllib3.exceptions import ConnectTimeoutError, DecodeError, NewConnectionError
from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeout

from ..errors import (
    BadEncoding,
    ConnectFailed,
    ConnectionFailed,
    ConnectTimeout,
    CrawlerError,
    FetchTimeout,
    TLSError,
)


def is_connect_failure(exc: requests.ConnectionError) -> bool:
    """Did ``exc`` happen while connecting, so the request may go to another address?"""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, NewConnectionError)


def translate(exc: BaseException, expired: bool) -> CrawlerError:
    """The crawler error for a transport exception (requests', urllib3's or the socket's)."""
    message = cause(exc)
    if expired:
        return FetchTimeout("total deadline exceeded")
    if isinstance(exc, (DecodeError, requests.exceptions.ContentDecodingError)):
        return BadEncoding(message)  # the same bytes would fail the same way: not retried
    tls = _tls_failure(exc)
    if tls is not None:
        return tls
    timeouts = (requests.Timeout, Urllib3ReadTimeout, TimeoutError)
    connect_timeout = isinstance(exc, ConnectTimeoutError) and not isinstance(
        exc, NewConnectionError
    )
    # Failing to connect at all is what a host outage looks like (its circuit breaker counts
    # these); a reset or a slow read after connecting is the URL's own problem.
    connect = connect_timeout or isinstance(exc, (NewConnectionError, requests.ConnectTimeout))
    if isinstance(exc, requests.ConnectionError):
        connect = connect or is_connect_failure(exc)
    if isinstance(exc, timeouts) or connect_timeout:
        return ConnectTimeout(message) if connect else FetchTimeout(message)
    return ConnectFailed(message) if connect else ConnectionFailed(message)


def cause(exc: BaseException) -> str:
    """A transport failure in a few words: ``connection refused at 127.0.0.1:8479`` (the OS
    error behind urllib3's wrappers, and where), not the 300 characters of their reprs."""
    where, errno = "", None
    for err in _chain(exc):
        conn: Any = getattr(err, "conn", None) or getattr(err, "pool", None)
        if not where and getattr(conn, "host", None):
            where = f" at {conn.host}:{conn.port}"
        if isinstance(err, OSError) and isinstance(err.errno, int) and errno is None:
            errno = err.errno
    if errno is not None:
        return f"{os.strerror(errno).lower()}{where}"
    if any(
        isinstance(e, (TimeoutError, ConnectTimeoutError, Urllib3ReadTimeout)) for e in _chain(exc)
    ):
        return f"timed out{where}"
    return f"{type(exc).__name__}: {exc}"[:500]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what is behind it: causes, contexts, urllib3's ``reason`` and arguments."""
    seen: dict[int, BaseException] = {}
    todo: list[object] = [exc]
    while todo:
        err = todo.pop(0)
        if not isinstance(err, BaseException) or id(err) in seen:
            continue
        seen[id(err)] = err
        todo += [err.__cause__, err.__context__, getattr(err, "reason", None), *err.args]
    return list(seen.values())


# "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: x (_ssl.c:1006)" -> the words
_SSL_NOISE = re.compile(r"^\[[A-Z0-9_]+: [A-Z0-9_]+\] | \(_ssl\.c:\d+\)$")
# Not a verdict on the server's TLS: it closed the connection mid-handshake (overload, a
# restart): retried like any reset.
_TRANSIENT_SSL = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _tls_failure(exc: BaseException) -> TLSError | None:
    """A TLSError when an ``ssl.SSLError`` (not a transient one) is behind ``exc``. requests
    and urllib3 wrap it in their own exceptions (``MaxRetryError(reason=SSLError(...))``)."""
    for err in _chain(exc):
        if isinstance(err, ssl.SSLError) and not isinstance(err, _TRANSIENT_SSL):
            if isinstance(err, ssl.SSLCertVerificationError) and err.verify_message:
                text = f"certificate verify failed: {err.verify_message}"
            else:
                text = _SSL_NOISE.sub("", str(err.args[1] if len(err.args) > 1 else err))
            return TLSError(text.strip()[:300])
    return None
