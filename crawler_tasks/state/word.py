"""The base of every name Python and the Lua scripts share (state/formats.py, state/counters.py)."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A value that is one word of the Lua side's: ``str()`` (and f-strings) give the word."""

    def __str__(self) -> str:
        return self.value
