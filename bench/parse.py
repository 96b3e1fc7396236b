"""Parsing speed: ``web.page.extract`` on link-dense pages, the cap on links included.

    .venv/bin/python bench/parse.py          # table
    .venv/bin/python bench/parse.py --json   # the same figures as JSON
    .venv/bin/python bench/parse.py --text-pages 410   # + the text length (issue 32)

A page of ``--links`` anchors (``<a href="/p/i">link i</a>``, 100,000 by default) is extracted
with ``max_links=5000`` (links beyond the cap are counted, not resolved), ``--repeat`` times;
the best and median seconds are printed, and ms per 1,000 anchors. The cap must keep the
work linear in the page's size: a page of 100,000 anchors took ~0.3 s on an idle 2-core
machine. Over ``--max-seconds`` (best run; 5 s by default: a quadratic slip, not noise) the
script exits 1. This bound was an assertion of tests/unit/test_parse.py::test_100k_links_capped,
which keeps the cap's results; the time is the benchmark's (a busy machine is not a fault).
Pure CPU, no Redis.

``--text-pages N``: the visible-text length of the first N pages of ``_broad_server.py
--real-sizes`` (41 a host), ``web.page.collapsed_length`` against the ``str.split`` count it
replaced, CPU ms per page, alternated, best and median of ``--repeat``.
"""

from __future__ import annotations

import statistics
import sys
import time

import _broad_server
from _util import emit, parser, table
from lxml import etree

from crawler_tasks.web.page import _CHUNK, _INVISIBLE, collapsed_length, extract

URL = "http://example.com/"
CAP = 5000


def measure(links: int, repeat: int) -> dict[str, float | int]:
    body = "".join(f'<a href="/p/{i}">link {i}</a>' for i in range(links)).encode()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        page = extract(body, URL, max_links=CAP)
        times.append(time.perf_counter() - start)
        assert len(page.links) == min(links, CAP), len(page.links)
    best = min(times)
    return {
        "anchors": links,
        "bytes": len(body),
        "kept_links": min(links, CAP),
        "best_s": round(best, 4),
        "median_s": round(statistics.median(times), 4),
        "ms_per_1000_anchors": round(1000 * best / links * 1000, 3),
    }


def _split_count(text: str) -> int:
    """The count before issue 32 (main 1a1dfa8): a word list per chunk."""
    length, glued = 0, False
    for at in range(0, len(text), _CHUNK):
        piece = text[at : at + _CHUNK]
        words = piece.split()
        if words:
            length += bool(length and not (glued and not piece[0].isspace()))
            length += sum(map(len, words)) + len(words) - 1
        glued = bool(words) and not piece[-1].isspace()
    return length


def text_length(pages: int, repeat: int) -> dict[str, float | int]:
    _broad_server.TEXT = _broad_server._text()
    texts = []
    for i in range(pages):
        body = _broad_server.page(i // 41, i % 41, 200, 41, 8000, "https", real=True)
        doc = etree.fromstring(body, etree.HTMLParser(huge_tree=True, remove_comments=True))
        etree.strip_elements(doc, "head", *_INVISIBLE, with_tail=False)
        texts.append(etree.tostring(doc, method="text", encoding=str, with_tail=False))
    counts = [("split", _split_count), ("collapsed_length", collapsed_length)]
    times: dict[str, list[float]] = {name: [] for name, _ in counts}
    for r in range(repeat):
        for name, count in counts if r % 2 == 0 else counts[::-1]:
            start = time.process_time()
            lengths = [count(t) for t in texts]
            times[name].append((time.process_time() - start) / pages * 1000)
            assert lengths == [len(" ".join(t.split())) for t in texts], name
    figures: dict[str, float | int] = {"pages": pages, "text_chars": sum(map(len, texts))}
    for name, ms in times.items():
        figures[f"{name}_best_ms"] = round(min(ms), 4)
        figures[f"{name}_median_ms"] = round(statistics.median(ms), 4)
    return figures


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--links", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--max-seconds", type=float, default=5.0)
    p.add_argument("--text-pages", type=int, default=0)
    args = p.parse_args()
    figures = measure(args.links, args.repeat)
    rows = [{"figure": k, "value": v} for k, v in figures.items()]
    tables = [table(f"extract, links capped at {CAP}", rows)]
    result: dict[str, object] = dict(figures)
    if args.text_pages:
        result["text_length"] = text = text_length(args.text_pages, args.repeat)
        tables.append(table("text length", [{"figure": k, "value": v} for k, v in text.items()]))
    emit(args, result, tables)
    if figures["best_s"] > args.max_seconds:
        print(f"slower than {args.max_seconds:g} s: {figures['best_s']} s", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
