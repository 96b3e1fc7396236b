"""Rendering tier: rendered pages/s, CPU and RSS of a render process, against scrapy-playwright.

    .venv/bin/python bench/render.py [--pages 150] [--concurrency 4] [--mixed-hosts 10] [--mixed-pages 40]

1. A JavaScript-built site (tests/support/jssite.py: every page's links inserted by a script,
   fetched by XHR or added after a ``setTimeout``), one loopback host, crawled with
   ``render="always"`` by a private Redis and local workers (one fetch process, one render process:
   a threads pool of CONCURRENCY sharing one Chromium), then by scrapy-playwright (same Chromium
   binary, the same CONCURRENCY per host, no delay, the same blocked resource types). Figures: pages
   found, wall time, pages/s, CPU seconds and RSS of the render process tree (Chromium's
   processes included; PSS, as RSS counts their shared pages once per process) sampled
   every 0.5 s, its first and last quarter compared ("flat").
2. A mixed site: MIXED_HOSTS hosts of MIXED_PAGES pages, one in ten built by JavaScript (the
   others with an inert script),
   crawled with ``render="auto"`` and ``render="always"``: pages found, share rendered, wall
   time and render CPU of each.
The machine may be shared with other work: figures are indicative.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _util
import psutil
import redis

from crawler_tasks import start_crawl
from crawler_tasks.settings import load
from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.support import jssite
from tests.support.sitegen import SiteServer


class TreeSampler:
    """Total RSS of a process tree every ``interval`` s (a list of MiB)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval, self.mb = pid, interval, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.mb.append(tree_rss(self.pid) / 2**20)
            self._stop.wait(self.interval)

    def figures(self) -> dict[str, float]:
        mb = self.mb or [0.0]
        q = max(1, len(mb) // 4)
        return {
            "rss_peak_mb": round(max(mb), 1),
            "rss_first_quarter_mb": round(sum(mb[:q]) / q, 1),
            "rss_last_quarter_mb": round(sum(mb[-q:]) / q, 1),
        }


def tree(pid: int) -> list[Any]:
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    return []


def tree_rss(pid: int) -> int:
    """PSS, not RSS: Chromium's processes share most of their pages, which RSS counts in
    each of them."""
    total = 0
    for p in tree(pid):
        with contextlib.suppress(psutil.Error):
            total += p.memory_full_info().pss
    return total


def tree_cpu(pid: int) -> float:
    total = 0.0
    for p in tree(pid):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def wait_for_render_worker(client: redis.Redis, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.exists("_kombu.binding.crawl.render") and client.exists("_kombu.binding.parse"):
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise TimeoutError("workers did not start")


def run_ours(args: Any, servers: list[SiteServer], mode: str) -> dict[str, Any]:
    hosts = [s.address for s in servers]
    with private_redis() as url, tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        settings = load(env={}, broker_url=url, output_dir=tmp)
        client = redis.Redis.from_url(url)
        env = {"CRAWLER_RENDER_SETTLE": "1"}
        with local_workers(
            url,
            url,
            fetch_threads=8,
            fetchers=1,
            extra_env=env,
            renderers=1,
            render_threads=args.concurrency,
        ) as procs:
            wait_for_render_worker(client)
            render = next(p for p in procs if "crawl.render" in " ".join(map(str, p.args)))
            cpu0, t0 = tree_cpu(render.pid), time.monotonic()
            with TreeSampler(render.pid) as rss:
                crawl = start_crawl(
                    [s.base_url + "/" for s in servers],
                    settings=settings,
                    client=client,
                    allow_private_networks=True,
                    allowed_domains=hosts,
                    rate=math.inf,
                    concurrency=args.concurrency,
                    render=mode,
                )
                summary = crawl.wait(timeout=args.timeout)
            wall, cpu = time.monotonic() - t0, tree_cpu(render.pid) - cpu0
        client.close()
    c = summary["counters"]
    pages = c.get("parsed", 0)
    return {
        "crawler": f"ours render={mode}",
        "pages": pages,
        "rendered": c.get("rendered", 0),
        "rendered_share": round(c.get("rendered", 0) / max(pages, 1), 3),
        "wall_s": round(wall, 2),
        "pages_per_s": round(pages / wall, 2),
        "render_cpu_s": round(cpu, 2),
        "render_cpu_ms_per_page": round(cpu / max(pages, 1) * 1000, 1),
        **rss.figures(),
    }


def run_scrapy(args: Any, server: SiteServer) -> dict[str, Any]:
    script = Path(__file__).resolve().parent / "_scrapy_playwright.py"
    with tempfile.TemporaryDirectory(prefix="bench-render-scrapy-") as tmp:
        out = Path(tmp) / "pages.jsonl"
        cmd = [sys.executable, str(script), server.base_url + "/", str(out), str(args.concurrency)]
        t0 = time.monotonic()
        with open(Path(tmp) / "log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            cpu = 0.0
            with TreeSampler(proc.pid) as rss:
                while proc.poll() is None and time.monotonic() - t0 < args.timeout:
                    cpu = max(cpu, tree_cpu(proc.pid))
                    time.sleep(0.5)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        wall = time.monotonic() - t0
        pages = len(out.read_text().splitlines()) if out.exists() else 0
        tail = (Path(tmp) / "log").read_text(errors="replace")[-500:]
    result = {
        "crawler": "scrapy-playwright",
        "pages": pages,
        "rendered": pages,
        "rendered_share": 1.0,
        "wall_s": round(wall, 2),
        "pages_per_s": round(pages / wall, 2),
        "render_cpu_s": round(cpu, 2),  # the whole process tree, sampled (a lower bound)
        "render_cpu_ms_per_page": round(cpu / max(pages, 1) * 1000, 1),
        **rss.figures(),
    }
    if proc.returncode != 0:
        result["output_tail"] = tail
    return result


@contextlib.contextmanager
def mixed_site(hosts: int, pages: int) -> Any:
    """``hosts`` loopback hosts of ``pages`` pages; one in ten (at least one) built by JS.
    The others have their links in the HTML and an inert script, as most sites have (an
    analytics tag): ``auto`` must sample them (a page without scripts is never rendered)."""
    with contextlib.ExitStack() as stack:
        servers = []
        for i in range(hosts):
            js = i % 10 == 0
            routes = jssite.routes(pages, js=js, extra=lambda i: "<script>window.t = 1</script>")
            servers.append(
                stack.enter_context(SiteServer(address=f"127.0.1.{i + 1}", extra_routes=routes))
            )
        yield servers


def main() -> int:
    p = _util.parser(__doc__)
    p.add_argument("--pages", type=int, default=150, help="pages of the JS site")
    p.add_argument("--concurrency", type=int, default=4, help="pages at once per host")
    p.add_argument("--mixed-hosts", type=int, default=10)
    p.add_argument("--mixed-pages", type=int, default=40)
    p.add_argument("--skip-scrapy", action="store_true")
    p.add_argument("--timeout", type=float, default=170.0)
    args = p.parse_args()
    rows = []
    with SiteServer(address="127.0.0.120", extra_routes=jssite.routes(args.pages, js=True)) as site:
        _util.log(args, f"JS site, {args.pages} pages: ours")
        rows.append(run_ours(args, [site], "always"))
        if not args.skip_scrapy:
            _util.log(args, "JS site: scrapy-playwright")
            rows.append(run_scrapy(args, site))
    mixed = []
    with mixed_site(args.mixed_hosts, args.mixed_pages) as servers:
        for mode in ("auto", "always"):
            _util.log(args, f"mixed site, {args.mixed_hosts} hosts: render={mode}")
            mixed.append(run_ours(args, servers, mode))
    expected = args.mixed_hosts * args.mixed_pages
    for row in mixed:
        row["found_of_expected"] = f"{row['pages']}/{expected}"
    result = {"js_site": rows, "mixed_site": mixed}
    _util.emit(
        args,
        result,
        [
            _util.table(f"JS site ({args.pages} pages, {args.concurrency} at once)", rows),
            _util.table(
                f"Mixed site ({args.mixed_hosts} hosts x {args.mixed_pages} pages, 1 in 10 JS)",
                mixed,
            ),
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
