"""Whether this machine sees the chunk store the crawl's other machines write (issue 49).

A crawl's chunk store may be a directory (``frontier_store``): right on one machine, or on
several when every one of them mounts the same directory (NFS, a shared volume). A directory
that is only local on several machines would lose URLs: a tail written on one host cannot be
read on another, so its host's pending URLs would never come back (the crawl never complete).

What decides is not the path nor the host names but whether the files are the same, so it is
tested: the first dispatcher to tend a crawl's tails writes a mark, ``mark-<token>``, into the
crawl's chunk store and then claims the crawl for it (``CrawlKeys.store_mark``, SET NX:
"<token> <host>"); every other dispatcher reads the claim and looks for that file. Found: the
directory is shared (or this is the same machine). Not found: this machine's directory is
another one, and its dispatcher must not flush or refill that crawl's tails
(worker/dispatch/tails_guard.py refuses with one line). An s3:// store is one place for every
machine: never tested.
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass

import redis

from ..errors import ObjectMissing
from . import objects
from .chunk_store import ChunkStore

#: The mark's object name in a crawl's chunk store (chunks are ``<2 hex>/<name>``, never this).
MARK = "mark-"


@dataclass(frozen=True)
class Seen:
    """The answer for one crawl: ``shared`` False names the host whose mark is missing here."""

    shared: bool
    writer: str = ""


def local(spec: str) -> bool:
    """Whether a ``frontier_store`` is a directory (what may differ from machine to machine)."""
    return bool(spec) and not objects.is_url(spec)


def seen_here(client: redis.Redis, key: str, store: ChunkStore, host: str = "") -> Seen:
    """Claims the crawl's chunk store for this machine's mark, or tests the claim's mark is
    readable here. ``host``: this machine's name (``socket.gethostname()`` by default; it only
    names the writer in the refusal line: the test is the file)."""
    host = host or socket.gethostname()
    claim = client.get(key)
    if claim is None:
        token = secrets.token_hex(8)
        # The file first: a claim never names a mark that is not written yet.
        store.objects.put(MARK + token, host.encode("utf-8", "replace"))
        if client.set(key, f"{token} {host}", nx=True):
            return Seen(True)
        store.objects.delete(MARK + token)  # another dispatcher claimed it first
        claim = client.get(key)
    token, _, writer = _text(claim).partition(" ")
    try:
        store.objects.get(MARK + token)
    except ObjectMissing:
        return Seen(False, writer)
    return Seen(True, writer)


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""
