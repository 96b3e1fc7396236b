"""WARC record building per page (issue 32): CPU and bytes of a response + request record, as
``CrawlOutput.warc`` writes them, for the pages of ``bench/broad.py --real-sizes`` (the same
sizes and text, gzip level 1 as its server sends them).

    .venv/bin/python bench/warc_records.py                 # 600 pages, the archive as received
    .venv/bin/python bench/warc_records.py --decoded       # the decoded body, as before issue 32

Runs against whichever ``crawler_tasks`` is imported (PYTHONPATH=<a checkout> for another
version: one without ``coded`` gets the decoded body). Prints CPU ms per page (the best of
``--rounds``), WARC bytes per page, and the pages' mean decoded and gzip sizes.

Measured (2 cores, 600 pages of 68 KB decoded, 32.7 KB gzip; issue 32): decoded and deflated
at level 1, 0.99 ms and 33,470 WARC bytes a page; as received, stored, 0.245 ms and 33,566.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _broad_server as web  # noqa: E402

from crawler_tasks.worker.output.files import CrawlOutput  # noqa: E402

REQUEST = [("User-Agent", "crawler-tasks/bench"), ("Accept-Encoding", "gzip, deflate, br")]


def pages(n: int, hosts: int = 200, per_host: int = 41) -> list[tuple[str, bytes, bytes]]:
    """(url, decoded body, gzip body) of ``n`` of the bench's real-size pages."""
    web.TEXT = web._text()
    out = []
    for i in range(n):
        host, k = i % hosts, (i // hosts) % per_host
        body = web.page(host, k, hosts, per_host, 443, "https", real=True)
        url = f"https://{web.address(host)}/p/{k}.html"
        out.append((url, body, gzip.compress(body, 1, mtime=0)))
    return out


def one_round(
    sample: list[tuple[str, bytes, bytes]], decoded: bool, level: int
) -> tuple[float, int]:
    """CPU seconds to write every page's records, and the WARC file's size."""
    coded = not decoded and "coded" in inspect.signature(CrawlOutput.warc).parameters
    with tempfile.TemporaryDirectory() as tmp:
        out = CrawlOutput(tmp, "bench", gzip_level=level)
        start = time.process_time()
        for url, body, wire in sample:
            head = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
            head.append(("Content-Length", str(len(wire))))
            if coded:
                out.warc(url, 200, "OK", head, wire, REQUEST, coded=True)
            else:
                out.warc(url, 200, "OK", head, body, REQUEST)
        cpu = time.process_time() - start
        size = sum(p.stat().st_size for p in Path(tmp).glob("crawl-*.warc.gz"))
        out.close()
    return cpu, size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pages", type=int, default=600)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--level", type=int, default=1, help="warc_gzip_level")
    p.add_argument("--decoded", action="store_true", help="the decoded body, as before")
    args = p.parse_args()
    sample = pages(args.pages)
    runs = [one_round(sample, args.decoded, args.level) for _ in range(args.rounds)]
    n = len(sample)
    coded = not args.decoded and "coded" in inspect.signature(CrawlOutput.warc).parameters
    print(
        json.dumps(
            {
                "archived": "as received (gzip, stored)" if coded else "decoded (deflated)",
                "pages": n,
                "cpu_ms_per_page": round(min(c for c, _ in runs) * 1000 / n, 3),
                "cpu_ms_per_page_all": [round(c * 1000 / n, 3) for c, _ in runs],
                "warc_bytes_per_page": round(runs[0][1] / n),
                "decoded_bytes_per_page": round(sum(len(b) for _, b, _ in sample) / n),
                "gzip_bytes_per_page": round(sum(len(w) for _, _, w in sample) / n),
            }
        )
    )


if __name__ == "__main__":
    main()
