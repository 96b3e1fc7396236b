"""The interface of an object store, and what an ``output`` string names."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import ConfigError

#: Schemes an ``output`` may name. Anything else that looks like a URL is refused.
SCHEMES = ("s3",)

#: "scheme:/" or "scheme://": a URL, not a path (a path with a colon in its first part and a
#: slash after it is taken for a URL mistyped, never for a directory of that name).
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")

#: S3's bucket names (3-63 lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_url(output: str | None) -> bool:
    """Does ``output`` name an object store (``s3://``)? False for a local path or empty."""
    return bool(output) and str(output).startswith("s3://")


def looks_like_url(output: str | None) -> bool:
    """``scheme:/...``: to be checked by :func:`place` even where a path is kept as given."""
    return bool(output) and _URL.match(str(output).strip()) is not None


def place(output: str) -> str:
    """``output`` as a crawl stores it: ``s3://BUCKET/PREFIX`` (no trailing slash) or an
    absolute local path. ConfigError, one line, for a URL of another scheme, a mistyped
    ``s3:/`` or a bucket name S3 would refuse."""
    text = str(output).strip()
    found = _URL.match(text)
    if found is None:
        return str(Path(text).resolve())
    scheme = found.group(1)
    if scheme.lower() not in SCHEMES:
        raise ConfigError(
            f"output {text}: {scheme}:// is not a place the crawler writes to; "
            "give a local directory or s3://BUCKET/PREFIX"
        )
    if not text.startswith("s3://"):
        raise ConfigError(f"output {text}: write it as s3://BUCKET/PREFIX")
    bucket, _, prefix = text[len("s3://") :].partition("/")
    if not _BUCKET.match(bucket):
        raise ConfigError(f"output {text}: {bucket!r} is not a valid S3 bucket name")
    prefix = prefix.strip("/")
    return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"


def local_root(output: str | None, output_dir: str) -> str:
    """Where this process writes a crawl's files (``<it>/<crawl_id>/``): the crawl's own
    directory, or this process's ``CRAWLER_OUTPUT_DIR`` (``output_dir``) if it has none or
    names an object store (whose files are staged there, then uploaded)."""
    return output_dir if not output or is_url(output) else output


class ObjectStore(ABC):
    """Named byte strings under one place (a directory, a bucket and prefix). Names are
    relative, ``/``-separated; :meth:`child` narrows the place. Every failure of the place
    itself is a StoreUnavailable, one line without secrets; an object that is not there an
    ObjectMissing."""

    #: Where it is, as a user would write it (``s3://bucket/prefix``, a path).
    url: str

    @abstractmethod
    def child(self, name: str) -> ObjectStore:
        """The store of the names under ``name/``."""

    @abstractmethod
    def put(self, name: str, data: bytes) -> None:
        """Write ``name`` whole (replacing it); a reader sees the old or the new bytes."""

    @abstractmethod
    def put_file(self, name: str, path: Path) -> None:
        """Write ``name`` from a local file, whole (large files in parts)."""

    @abstractmethod
    def get(self, name: str) -> bytes:
        """Its bytes; ObjectMissing if there is none."""

    @abstractmethod
    def open(self, name: str) -> BinaryIO:
        """Its bytes as a stream (for large objects); ObjectMissing if there is none."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Its size in bytes; ObjectMissing if there is none."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Gone (nothing if it was not there)."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Names that begin with ``prefix``, sorted, at any depth."""

    @abstractmethod
    def check(self) -> None:
        """StoreUnavailable now if objects cannot be written here (no bucket, credentials
        refused, unreachable): asked before a crawl writes anything."""

    def exists(self, name: str) -> bool:
        from ...errors import ObjectMissing

        try:
            self.size(name)
        except ObjectMissing:
            return False
        return True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"
