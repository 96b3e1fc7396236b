"""``crawler crawl --seeds-file FILE``: seeds one URL a line (``-``: standard input; ``# comments``, whole lines or after a URL), checked
whole before anything is written, then admitted in batches of ``SEED_BATCH``: a million seeds
never travel in one message nor sit in the crawl's stored options, which keep the first
``KEPT`` (for listings) and, unless ``--allowed-domain`` is given, the seeds' hosts (the
default scope)."""

from __future__ import annotations

import itertools
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import InvalidSeed
from ..web.seeds import check_seeds
from ..web.urls import host_of

#: A comment after a URL: "#" after white space ("#" inside a URL starts its fragment).
_INLINE_COMMENT = re.compile(r"\s+#.*$")

#: Seeds of a file kept in the crawl's options (``crawler list`` shows the first).
KEPT = 100


class SeedsFile:
    """A seeds file that can be read twice (standard input is spooled to a temporary file)."""

    def __init__(self, path: str) -> None:
        self._spool: IO[bytes] | None = None
        if path == "-":
            self._spool = tempfile.NamedTemporaryFile(prefix="crawler-seeds-")  # noqa: SIM115
            shutil.copyfileobj(sys.stdin.buffer, self._spool)
            self._spool.flush()
            path = self._spool.name
        self.path = Path(path)
        if self.path.is_dir():
            raise InvalidSeed(str(path), "a directory, not a seeds file (one URL a line)")
        if not self.path.is_file():
            raise InvalidSeed(str(path), "no such seeds file")
        self.count = 0
        self.hosts: dict[str, None] = {}

    def _lines(self) -> Iterator[tuple[int, str]]:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                text = _INLINE_COMMENT.sub("", line.strip())
                if text and not text.startswith("#"):
                    yield number, text

    def check(self, allow_private: bool) -> list[str]:
        """Every seed checked (InvalidSeed naming its line); the first ``KEPT``, normalised."""
        first: list[str] = []
        for number, text in self._lines():
            try:
                (url,) = check_seeds([text], allow_private)
            except InvalidSeed as exc:
                raise InvalidSeed(text, f"line {number} of {self.path}: {exc.why}") from None
            self.count += 1
            self.hosts[host_of(url)] = None
            if len(first) < KEPT:
                first.append(url)
        if not self.count:
            raise InvalidSeed(str(self.path), "the seeds file holds no URL")
        return first

    def rest(self) -> Iterator[str]:
        """The seeds after the first ``KEPT``, normalised (checked by :meth:`check`)."""
        for _, text in itertools.islice(self._lines(), KEPT, None):
            yield check_seeds([text], True)[0]

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
