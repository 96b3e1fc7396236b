"""Single-process baseline crawler for bench/crawl.py (run as a subprocess, not a benchmark).

    .venv/bin/python bench/_bfs_crawler.py START_URL OUTPUT.jsonl

The simplest thing that could work: one ``requests.Session``, one URL at a time, breadth
first, links from ``lxml.html`` (``//a/@href``), resolved with ``urljoin``, fragment dropped,
same host only, the crawler's skipped extensions ignored, deduplicated in a Python set,
robots.txt obeyed (protego). One JSON line per URL (url, status, title).
"""

from __future__ import annotations

import json
import posixpath
import sys
from collections import deque
from urllib.parse import urldefrag, urljoin, urlsplit

import _util  # noqa: F401  (puts the checkout on sys.path for tests.support)
import lxml.html
import requests
from protego import Protego

from tests.support.sitegen import SKIP_EXTENSIONS  # the same skip rule as the expected set

AGENT = "bench-bfs"


def main() -> None:
    start, output = sys.argv[1], sys.argv[2]
    host = urlsplit(start).netloc
    session = requests.Session()
    session.headers["User-Agent"] = AGENT
    robots_resp = session.get(f"http://{host}/robots.txt", timeout=10)
    robots = Protego.parse(robots_resp.text if robots_resp.status_code == 200 else "")
    seen = {start}
    queue = deque([start])
    with open(output, "w", encoding="utf-8") as out:
        while queue:
            url = queue.popleft()
            if not robots.can_fetch(url, AGENT):
                continue
            try:
                resp = session.get(url, timeout=10)
            except requests.RequestException as exc:
                out.write(json.dumps({"url": url, "error": str(exc)}) + "\n")
                continue
            title = None
            ctype = resp.headers.get("content-type", "")
            if resp.status_code == 200 and ctype.startswith("text/html"):
                doc = lxml.html.fromstring(resp.content)
                node = doc.find(".//title")
                title = node.text if node is not None else None
                for href in doc.xpath("//a/@href"):
                    link = urldefrag(urljoin(resp.url, href.strip()))[0]
                    parts = urlsplit(link)
                    if parts.netloc != host or parts.scheme not in ("http", "https"):
                        continue
                    if posixpath.splitext(parts.path)[1].lower() in SKIP_EXTENSIONS:
                        continue
                    if link not in seen:
                        seen.add(link)
                        queue.append(link)
            out.write(json.dumps({"url": url, "status": resp.status_code, "title": title}) + "\n")


if __name__ == "__main__":
    main()
