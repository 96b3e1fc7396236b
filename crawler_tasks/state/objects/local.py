"""A directory as an object store: a crawl's output on a local (or shared) file system."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import ObjectMissing, StoreUnavailable
from .base import ObjectStore


class LocalStore(ObjectStore):
    """Objects as files under ``root``; a write lands whole (a temporary file renamed)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def child(self, name: str) -> LocalStore:
        return LocalStore(self.root / name)

    def _path(self, name: str) -> Path:
        return self.root / name

    def _missing(self, name: str) -> ObjectMissing:
        return ObjectMissing(self.url, f"no object {name}")

    def put(self, name: str, data: bytes) -> None:
        self._write(name, lambda tmp: tmp.write_bytes(data))

    def put_file(self, name: str, path: Path) -> None:
        self._write(name, lambda tmp: shutil.copyfile(path, tmp))

    def _write(self, name: str, fill: object) -> None:
        path = self._path(name)
        tmp = path.with_name(f".{path.name}.put-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fill(tmp)  # type: ignore[operator]
            os.replace(tmp, path)  # readers never see half an object
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreUnavailable(self.url, exc.strerror or type(exc).__name__) from exc

    def get(self, name: str) -> bytes:
        with self.open(name) as f:
            return f.read()

    def open(self, name: str) -> BinaryIO:
        try:
            return self._path(name).open("rb")
        except FileNotFoundError:
            raise self._missing(name) from None
        except OSError as exc:
            raise StoreUnavailable(self.url, exc.strerror or type(exc).__name__) from exc

    def size(self, name: str) -> int:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            raise self._missing(name) from None

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[str]:
        if not self.root.is_dir():
            return iter(())
        names = (p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())
        return iter(sorted(n for n in names if n.startswith(prefix) and "/." not in f"/{n}"))

    def check(self) -> None:
        path = self.root.absolute()
        while not path.exists():
            path = path.parent
        if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
            raise StoreUnavailable(self.url, f"cannot write in {path}")
