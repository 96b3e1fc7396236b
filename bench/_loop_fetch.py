"""A prototype, for measuring only: our fetch workers with the HTTP exchange on one event loop.

Issue 32's step 3, before it is built: how much of ``engine_model.py``'s gain our whole
crawler keeps. This file, copied as ``sitecustomize.py`` into a directory put first on the
workers' PYTHONPATH, replaces ``Fetcher.get`` in every process where ``LOOP_FETCH=1``: the
calling thread still vets the host and takes its send gate's slot, then hands the request to
one asyncio loop of the process (aiohttp, our TLS context, kept connections) and waits; the
body is decoded in the thread (gzip kept as received for the WARC, as ours).

    d=$(mktemp -d); cp bench/_loop_fetch.py $d/sitecustomize.py
    PYTHONPATH=$d .venv/bin/python bench/broad.py --https --real-sizes --hosts 200 \\
        --pages 41 --modes fast --skip-scrapy --worker-env LOOP_FETCH=1

NOT the engine: no redirects followed, no proxy, no last look of the send gate before the
write, no address pinning for names (the bench's hosts are IP literals), no bounded reads
(the whole body is read, then cut), errors mapped coarsely. Valid for the fast broad bench
only, where none of that is exercised; an upper bound of what moving the exchange saves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
import zlib
from typing import Any

_CODED = {"gzip": 47, "x-gzip": 47, "deflate": 15}


class _Loop:
    """One asyncio loop and aiohttp session per process, made in the process that fetches
    (a forked child makes its own)."""

    def __init__(self) -> None:
        self.lock, self.pid = threading.Lock(), -1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.session: Any = None

    def get(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        with self.lock:
            if self.pid != os.getpid():
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, daemon=True).start()
                self.session = asyncio.run_coroutine_threadsafe(_session(), self.loop).result()
                self.pid = os.getpid()
            assert self.loop is not None
            return self.loop, self.session


async def _session() -> Any:
    import aiohttp

    from crawler_tasks.web.pinning import tls_context

    ssl = tls_context(os.environ.get("CRAWLER_CA_BUNDLE") or None)
    conn = aiohttp.TCPConnector(limit=0, ssl=ssl, keepalive_timeout=30)
    return aiohttp.ClientSession(connector=conn, auto_decompress=False)


async def _exchange(session: Any, url: str, headers: dict[str, str], total: float) -> Any:
    import aiohttp

    sent = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=total)
    async with session.get(url, headers=headers, allow_redirects=False, timeout=timeout) as r:
        answered = time.monotonic()
        peer = r.connection.transport.get_extra_info("peername") if r.connection else None
        raw = await r.read()
        return r, raw, sent, answered, peer


def _response(r: Any, raw: bytes, url: str, limit: int, **fields: Any) -> Any:
    """Our Response from aiohttp's, the body decoded here (a gzip body kept for the WARC)."""
    from crawler_tasks.web.body import Response, media_type

    coding = r.headers.get("content-encoding", "").strip().lower()
    body, wire = raw, None
    if coding in _CODED and raw:
        body, wire = zlib.decompress(raw, _CODED[coding]), raw
    truncated = len(body) > limit
    return Response(
        url=url,
        final_url=url,
        status=r.status,
        headers={k.lower(): v for k, v in r.headers.items()},
        content_type=media_type(r.headers.get("content-type")),
        body=body[:limit],
        truncated=truncated,
        redirects=[],
        raw_headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in r.raw_headers],
        http_version=f"HTTP/{r.version.major}.{r.version.minor}",
        wire=None if truncated else wire,
        **fields,
    )


def _install() -> None:
    import aiohttp
    from requests.structures import CaseInsensitiveDict

    from crawler_tasks.errors import ConnectionFailed, FetchTimeout
    from crawler_tasks.web import transport
    from crawler_tasks.web.fetcher import Fetcher

    engine = _Loop()

    def get(self: Fetcher, url: str, *, allow_private: bool = False, **kw: Any) -> Any:
        gate = self.transport.context.gate
        if gate is not None:
            self.transport.context.gate = None
            gate()  # the slot, as ours (its last look before the write is not taken here)
            self.transport.context.gate = gate
        started = time.monotonic()
        host, port = transport.host_port(url)
        addresses = self.transport.addresses.check(host, port, allow_private=allow_private)
        merged = CaseInsensitiveDict(self.transport.session.headers)
        merged.update(kw.get("headers") or {})
        if kw.get("host_headers") is not None:
            merged.update(kw["host_headers"](host))
        loop, session = engine.get()
        total = kw.get("timeout") or self._total_timeout
        job = _exchange(session, url, dict(merged), total)
        try:
            r, raw, sent, answered, peer = asyncio.run_coroutine_threadsafe(job, loop).result()
        except asyncio.TimeoutError:
            raise FetchTimeout("total deadline exceeded") from None
        except aiohttp.ClientError as exc:
            raise ConnectionFailed(str(exc)) from exc
        limit = kw.get("max_body_bytes") or self._max_body_bytes
        return _response(
            r, raw, url, limit, elapsed=time.monotonic() - started,
            ip=peer[0] if peer else addresses[0], sent_at=sent, latency=answered - sent,
        )  # fmt: skip

    Fetcher.get = get  # type: ignore[method-assign]
    print(f"_loop_fetch: Fetcher.get on an event loop in process {os.getpid()}", file=sys.stderr)


if os.environ.get("LOOP_FETCH") == "1":
    with contextlib.suppress(ImportError):  # a process without the crawler or aiohttp
        _install()
