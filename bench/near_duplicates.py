"""Near-duplicate detection: precision and recall of the crawl's SimHash (64 bits, word
3-shingles, Hamming distance <= 3) on a generated corpus with known near-duplicates.

    .venv/bin/python bench/near_duplicates.py          # table
    .venv/bin/python bench/near_duplicates.py --json   # the same figures as JSON

The corpus: ``--originals`` pages of 200-1,500 words drawn from a Zipf-like vocabulary of 20,000
words (so common words repeat, as in prose), each wrapped in one of 5 site templates
(navigation and footer text, ~60 words, shared by the pages of a template: the hard
negatives). Each original gets 0-3 near-duplicates, made with one kind of edit: 1-3 words
replaced, a sentence (10 words) inserted, the template's date line changed, or ~5 % of the
words replaced (still a near-duplicate by this corpus's definition: the hardest kind).
Pairs are judged with the crawl's own index (state/neardup.py logic, in memory here: band
candidates, then distance). A detected pair is right when both pages come from the same
original. Recall is given per edit kind, and precision over every detected pair.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Any

from _util import emit, parser, table

from crawler_tasks.web.simhash import MAX_DISTANCE, bands, distance, simhash

EDITS = ("words_1_3", "sentence", "template_date", "words_5pct")


def vocabulary(rng: random.Random, n: int = 20_000) -> tuple[list[str], list[float]]:
    words = [f"{rng.choice('bcdfghklmnprst')}{rng.choice('aeiou')}{i:x}" for i in range(n)]
    weights = [1 / (rank + 1) for rank in range(n)]  # Zipf: common words repeat
    return words, weights


def corpus(seed: int, originals: int) -> list[tuple[int, str, list[str]]]:
    """(group, edit kind or "original", words) per page."""
    rng = random.Random(seed)
    words, weights = vocabulary(rng)
    templates = [rng.choices(words, weights, k=60) for _ in range(5)]
    pages = []
    for group in range(originals):
        template = templates[group % 5]
        body = rng.choices(words, weights, k=rng.randint(200, 1500))
        date = [f"day{rng.randint(1, 28)}", f"month{rng.randint(1, 12)}"]
        pages.append((group, "original", template[:30] + date + body + template[30:]))
        for _ in range(rng.choice((0, 0, 1, 2, 3))):
            kind = rng.choice(EDITS)
            page = _edit(rng, kind, list(body), words, weights)
            new_date = [f"day{rng.randint(1, 28)}", date[1]] if kind == "template_date" else date
            pages.append((group, kind, template[:30] + new_date + page + template[30:]))
    return pages


def _edit(
    rng: random.Random, kind: str, body: list[str], words: list[str], w: list[float]
) -> list[str]:
    if kind == "words_1_3":
        for _ in range(rng.randint(1, 3)):
            body[rng.randrange(len(body))] = rng.choice(words)
    elif kind == "sentence":
        at = rng.randrange(len(body))
        body[at:at] = rng.choices(words, w, k=10)
    elif kind == "words_5pct":
        for _ in range(len(body) // 20):
            body[rng.randrange(len(body))] = rng.choice(words)
    return body


def measure(seed: int, originals: int) -> dict[str, Any]:
    pages = corpus(seed, originals)
    t0 = time.perf_counter()
    prints = [simhash(words) or 0 for _, _, words in pages]
    per_page_ms = (time.perf_counter() - t0) * 1000 / len(pages)
    index: dict[str, list[int]] = defaultdict(list)
    found: set[tuple[int, int]] = set()
    for i, fp in enumerate(prints):  # every pair within distance, via the band index
        for band in bands(fp):
            for j in index[band]:
                if distance(fp, prints[j]) <= MAX_DISTANCE:
                    found.add((j, i))
            index[band].append(i)
    truth = {(j, i) for i in range(len(pages)) for j in range(i) if pages[i][0] == pages[j][0]}
    right = found & truth
    recall = {}
    for kind in EDITS:
        pairs = {(j, i) for j, i in truth if kind in (pages[i][1], pages[j][1])}
        recall[kind] = round(len(pairs & found) / len(pairs), 3) if pairs else None
    return {
        "pages": len(pages),
        "true_pairs": len(truth),
        "detected_pairs": len(found),
        "precision": round(len(right) / len(found), 4) if found else None,
        "recall": round(len(right) / len(truth), 4) if truth else None,
        "recall_by_edit": recall,
        "simhash_ms_per_page": round(per_page_ms, 3),
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--originals", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    figures = measure(args.seed, args.originals)
    rows = [{"figure": k, "value": v} for k, v in figures.items() if k != "recall_by_edit"]
    rows += [{"figure": f"recall: {k}", "value": v} for k, v in figures["recall_by_edit"].items()]
    emit(args, figures, [table("near-duplicates (SimHash, <= 3 bits)", rows)])


if __name__ == "__main__":
    main()
