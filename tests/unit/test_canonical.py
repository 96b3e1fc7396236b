"""Near-duplicate fingerprints (simhash), the pure part: the distance follows the size of the
change. Canonical links and near duplicates in a crawl: tests/integration/test_canonical.py."""

from __future__ import annotations

import random

from crawler_tasks.web.simhash import distance, simhash

WORDS = [f"w{i}" for i in range(3000)]


def text(rng: random.Random, n: int = 1000) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


def test_simhash_distance_follows_the_size_of_the_change() -> None:
    rng = random.Random(3)
    words = text(rng, 600)
    small = list(words)
    small[10] = "x"
    assert distance(simhash(words) or 0, simhash(small) or 0) <= 3
    assert distance(simhash(words) or 0, simhash(text(rng, 600)) or 0) > 10
    assert simhash(["too", "short"]) is None
