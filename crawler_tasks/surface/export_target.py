"""Where ``crawler export`` writes, checked before anything is read: a new local file (``-o``)
or one replaced (``-O``), or, for a WACZ, an object of an S3 store
(``--wacz -o s3://BUCKET/PREFIX/NAME.wacz``).

A WACZ bound for a store is made in a temporary local directory first (the indexer and the
ZIP need a file), then PUT whole under its name (in parts when large, as the segments are:
state/objects/s3.py), so the object appears whole or not at all, as a local export's file
does; the store is the one ``output`` names, through the AWS SDK's own chain
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, StoreUnavailable
from ..state import objects
from ..state.objects import ObjectStore
from .cli_common import Fail


@dataclass(frozen=True)
class Target:
    """A checked target: a local file, or ``name`` in ``store``."""

    path: Path
    store: ObjectStore | None = None
    name: str = ""

    def __str__(self) -> str:
        return f"{self.store.url}/{self.name}" if self.store is not None else str(self.path)

    @contextmanager
    def writing(self) -> Iterator[Path]:
        """The local file to write; a store's target is uploaded once it is written whole."""
        if self.store is None:
            yield self.path
            return
        with tempfile.TemporaryDirectory(prefix="crawler-export-") as work:
            path = Path(work) / self.name
            yield path
            self.store.put_file(self.name, path)


def check_target(path: Path, overwrite: bool, formats: tuple[str, ...]) -> None:
    """Everything that can be known before reading a record: one line each (exit 2)."""
    if path.is_dir():
        raise Fail(f"{path} is a directory")
    _check_format(path.name, formats)
    if path.exists() and not overwrite:
        raise Fail(f"{path} exists: -O overwrites it")
    parent = path.parent
    if not parent.is_dir():
        raise Fail(f"no directory {parent} to write {path.name} in")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Fail(f"cannot write in {parent}: permission denied")


def _check_format(name: str, formats: tuple[str, ...]) -> None:
    suffix = Path(name).suffix.lower()
    if suffix not in formats:
        raise Fail(f"{name}: unknown format {Path(name).suffix!r}; use one of {', '.join(formats)}")
    if suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise Fail("Parquet needs pyarrow: pip install 'crawler-tasks[export]'")


def target_of(
    new_file: str | None, any_file: str | None, wacz: bool, formats: tuple[str, ...]
) -> Target:
    """The file (or object) to write, checked before anything is read."""
    if (new_file is None) == (any_file is None):
        raise Fail("give the file once: -o FILE (new) or -O FILE (replaced)")
    given = str(new_file or any_file)
    if wacz and importlib.util.find_spec("cdxj_indexer") is None:
        raise Fail("WACZ needs cdxj-indexer: pip install 'crawler-tasks[export]'")
    if objects.looks_like_url(given):  # never a local directory named "s3:"
        if not wacz:
            raise Fail(f"{given}: --items and --pages write a local file (upload it after)")
        return _stored(given, any_file is not None)
    path = Path(given).absolute()
    check_target(path, any_file is not None, (".wacz",) if wacz else formats)
    return Target(path)


def _stored(given: str, overwrite: bool) -> Target:
    """``s3://BUCKET/PREFIX/NAME.wacz`` as a Target: the bucket asked now (exit 2 if it is
    missing or the credentials are refused), the object refused if there unless -O."""
    try:
        url = objects.place(given)
    except ConfigError as exc:
        raise Fail(str(exc)) from None
    where, _, name = url.partition("//")[2].rpartition("/")
    if not where:
        raise Fail(f"{given}: name the object: s3://BUCKET/PREFIX/NAME.wacz")
    _check_format(name, (".wacz",))
    try:
        store = objects.store_for(f"s3://{where}")
        store.check()
        if store.exists(name) and not overwrite:
            raise Fail(f"{given} exists: -O overwrites it")
    except (StoreUnavailable, ConfigError) as exc:
        raise Fail(f"{given}: {exc}") from None
    return Target(Path(name), store, name)
