"""64-bit SimHash of a page's visible text, for near-duplicate detection. Pure functions.

Features are word 3-shingles (lower-cased words), each hashed with MurmurHash3 (64 bits) and
counted once (a repeated phrase does not outweigh the rest). Two texts are near-duplicates when
their fingerprints differ in at most ``MAX_DISTANCE`` bits. :func:`bands` splits a fingerprint
into 4 bands of 16 bits: fingerprints within 3 bits share at least one band exactly
(pigeonhole), which is how the crawl's index (state/neardup.py) finds candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

import mmh3

MAX_DISTANCE = 3
SHINGLE = 3
#: Words of a page fingerprinted at most: bounds the cost of a huge page (~50 ms).
MAX_WORDS = 20_000
_MASK = (1 << 64) - 1


def simhash(words: Iterable[str], shingle: int = SHINGLE) -> int | None:
    """The fingerprint of a text given as words; None for fewer than SHINGLE words."""
    ws = [w.lower() for w, _ in zip(words, range(MAX_WORDS), strict=False)]
    if len(ws) < shingle:
        return None
    hashes = {
        mmh3.hash64(" ".join(ws[i : i + shingle]), signed=False)[0]
        for i in range(len(ws) - shingle + 1)
    }
    half = len(hashes) / 2
    out = 0
    for bit in range(64):
        ones = sum(h >> bit & 1 for h in hashes)
        if ones > half:
            out |= 1 << bit
    return out & _MASK


def distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def bands(fingerprint: int) -> list[str]:
    """The 4 band keys of a fingerprint ("band:hex16")."""
    return [f"{i}:{fingerprint >> (16 * i) & 0xFFFF:04x}" for i in range(4)]
