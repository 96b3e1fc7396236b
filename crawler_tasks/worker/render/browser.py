"""One headless Chromium per render process, driven by Playwright's async API on one event loop
in a thread of its own (Playwright's objects belong to the thread that made them; a threads
pool's task threads hand pages to that loop and wait). The pages of one crawl share a browser
context for ``render_pages_per_context`` pages (a context per page costs a renderer process
each); no cookie, cache or storage crosses from one crawl to another.

Every request the page makes goes to ``RenderJob.subrequest`` (worker/visit/render_guard.py), which
fetches it through the crawler's own fetcher (address guard and pinning, robots.txt, the
host's token) or refuses it; its answer is fulfilled into the page, so the browser itself never
connects anywhere. It is launched with an unreachable proxy as well: a request that escaped
the route (a WebSocket, a prefetch) fails in the browser instead of reaching the network.

Limits: ``render_deadline`` per page (its load, settle and subrequests), a V8 heap cap per
page (a page that allocates past it crashes alone), and the browser replaced after
``render_browser_pages`` pages or past ``render_max_rss_mb`` of RSS (checked every few pages).
A dialog, a download, a pop-up or a main-frame navigation makes the render refused. A crash or
a hang is :class:`RenderFailed` (the URL's retry), never the process's end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import RenderFailed, RenderRefused
from ...settings import Settings
from .render_settle import Traffic, settled, timers_js

log = logging.getLogger(__name__)

DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: Seconds beyond the deadline the waiting task gives the loop (to close the page) before it
#: gives up on it and the browser is replaced.
GRACE = 10.0
#: Seconds a browser may take to start, apart from a page's deadline: a slow start must not fail it.
LAUNCH_WAIT = 60.0
#: Pages between two looks at the browser's RSS.
RSS_EVERY = 20
#: An answer to one subrequest: (status, headers, body), or None to abort it.
Answer = tuple[int, dict[str, str], bytes] | None


@dataclass
class RenderJob:
    """One page to render: its URL, its fetched document, and the policy for its requests."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes
    #: (url, method, resource type) -> the answer; blocking: run off the loop's thread.
    subrequest: Callable[[str, str, str], Answer]
    deadline: float
    settle: float
    #: Seconds of nothing happening that make a loaded page quiet; timers waited for up to.
    quiet: float = 0.1
    timer_wait: float = 1.0
    #: Pages of one group (a crawl) share browser contexts; other groups never see them.
    group: str = ""
    refused: list[str] = field(default_factory=list)
    #: Seconds the page's subrequests have waited so far for their hosts' tokens and slots
    #: (render_guard.py): not the page's own time, so not counted against ``settle``.
    held: Callable[[], float] = lambda: 0.0


@dataclass
class _Context:
    """A browser context of one group: pages begun in it, pages open in it now."""

    context: Any
    browser: Any
    used: int = 0
    open: int = 0


@dataclass
class Rendered:
    html: str
    final_url: str


def chromium_path(settings: Settings) -> str:
    return settings.chromium_path or DEFAULT_CHROMIUM


def browser_problem(settings: Settings) -> str | None:
    """Why this host's Chromium cannot run (None if it answers ``--version``): checked when a
    render worker starts, which refuses to start with that line rather than say "ready" and
    fail every page (Ubuntu's ``chromium-browser`` is a shim asking for the snap)."""
    path = chromium_path(settings)
    where = f"CRAWLER_CHROMIUM_PATH={path}" if settings.chromium_path else f"Chromium ({path})"
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return f"{where}: no such file (install chromium, or set CRAWLER_CHROMIUM_PATH)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{where}: cannot run it ({exc})"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"{where}: exits {done.returncode}: {said[0][:200] if said else 'no output'}"
    return None


def launch_args(settings: Settings) -> list[str]:
    args = [f"--js-flags=--max-old-space-size={settings.render_js_heap_mb}"]
    if os.geteuid() == 0:  # Chromium refuses to run its sandbox as root
        args.append("--no-sandbox")
    return args


class BrowserPool:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._pages = 0  # rendered by the current browser
        self._open: dict[Any, int] = {}  # browser -> its pages open now
        self._contexts: dict[str, _Context] = {}  # group -> the context its pages go to
        #: One launch at a time: pages that start together must not each launch a browser.
        self._launching = asyncio.Lock()

    def render(self, job: RenderJob) -> Rendered:
        """Render ``job`` (from any thread); raises RenderFailed or RenderRefused."""
        loop = self._started()
        future = asyncio.run_coroutine_threadsafe(self._render(job), loop)
        wait = job.deadline + GRACE + LAUNCH_WAIT
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            asyncio.run_coroutine_threadsafe(self._replace(), loop)
            raise RenderFailed(f"the browser did not answer within {wait:g}s") from None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="crawler-render", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        self._loop = None

    async def _shutdown(self) -> None:
        if self._browser is not None:
            await self._browser.close()
        if self._pw is not None:
            await self._pw.stop()
        self._browser = self._pw = None

    async def _current(self) -> Any:
        """The browser new pages go to: a new one after a crash, ``render_browser_pages`` pages
        or ``render_max_rss_mb``."""
        async with self._launching:
            return await self._current_locked()

    async def _current_locked(self) -> Any:
        s = self.settings
        old = self._browser
        worn = self._pages >= s.render_browser_pages
        if not worn and self._pages and self._pages % RSS_EVERY == 0:
            worn = await asyncio.to_thread(rss_mb) > s.render_max_rss_mb  # off the loop
        if old is not None and old.is_connected() and not worn:
            return old
        if old is not None:
            await self._retire(old)
        if self._pw is None:
            from playwright.async_api import async_playwright  # the [render] extra

            self._pw = await async_playwright().start()
        try:
            self._browser = await self._pw.chromium.launch(
                executable_path=chromium_path(s),
                args=launch_args(s),
                timeout=LAUNCH_WAIT * 1000,
                # Nothing leaves but through the route (see the module docstring).
                proxy={"server": "http://127.0.0.1:9", "bypass": "<-loopback>"},
            )
        except Exception as exc:  # playwright's Error: its first line is the cause
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise RenderFailed(f"the browser cannot start: {first}") from None
        self._pages, self._open[self._browser] = 0, 0
        log.info("render: browser started (%s)", chromium_path(s))
        return self._browser

    async def _retire(self, browser: Any) -> None:
        """Close ``browser`` once its open pages are done (now, if none)."""
        if browser is self._browser:
            self._browser = None
        if self._open.get(browser, 0) == 0:
            self._open.pop(browser, None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 10)

    async def _replace(self) -> None:
        if self._browser is not None:
            self._open[self._browser] = 0  # its pages are given up on
            await self._retire(self._browser)

    async def _render(self, job: RenderJob) -> Rendered:
        browser = await self._current()
        self._pages += 1
        self._open[browser] = self._open.get(browser, 0) + 1
        holder = None
        try:
            holder = await self._context(browser, job.group)
            page = await holder.context.new_page()
            try:
                _refuse_escapes(page, job)
                await page.route("**/*", _router(page, job))
                return await asyncio.wait_for(_load(page, job), job.deadline)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(page.close(), 5)
        except asyncio.TimeoutError:
            raise RenderFailed(f"render deadline ({job.deadline:g}s) exceeded") from None
        except (RenderFailed, RenderRefused):
            raise
        except Exception as exc:  # Playwright's: a crashed page or browser
            raise RenderFailed(f"{type(exc).__name__}: {str(exc)[:300]}") from None
        finally:
            self._open[browser] = self._open.get(browser, 1) - 1
            if holder is not None:
                await self._done_with(job.group, holder)
            if browser is not self._browser:
                await self._retire(browser)

    async def _context(self, browser: Any, group: str) -> _Context:
        """The context ``group``'s next page goes to: a new one every
        ``render_pages_per_context`` pages, or on a new browser."""
        holder = self._contexts.get(group)
        limit = self.settings.render_pages_per_context
        if holder is None or holder.browser is not browser or holder.used >= limit:
            context = await browser.new_context(accept_downloads=False, service_workers="block")
            await context.add_init_script(timers_js(self.settings.render_timer_wait))
            self._contexts[group] = holder = _Context(context, browser)
        holder.used += 1
        holder.open += 1
        return holder

    async def _done_with(self, group: str, holder: _Context) -> None:
        """One page of ``holder`` closed: a context no longer current closes with its last."""
        holder.open -= 1
        if holder.open == 0 and self._contexts.get(group) is not holder:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(holder.context.close(), 5)


async def _load(page: Any, job: RenderJob) -> Rendered:
    traffic = Traffic(page)
    await page.goto(job.url, wait_until="load")
    with contextlib.suppress(Exception):  # a page that never goes quiet is taken as it is
        await settled(page, traffic, job.settle, job.quiet, job.held)
    if job.refused:
        raise RenderRefused(f"the page opened {', '.join(sorted(set(job.refused)))}")
    return Rendered(await page.content(), page.url)


def _refuse_escapes(page: Any, job: RenderJob) -> None:
    """Dialogs, downloads and pop-ups are refused, and make the render refused."""

    def refuse(kind: str, close: Callable[[], Any]) -> None:
        job.refused.append(kind)
        asyncio.ensure_future(_quietly(close()))

    page.on("dialog", lambda d: refuse("a dialog", d.dismiss))
    page.on("download", lambda d: refuse("a download", d.cancel))
    page.on("popup", lambda p: refuse("a pop-up", p.close))


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable


def _router(page: Any, job: RenderJob) -> Callable[[Any], Any]:
    """The page's route: its own document from the fetched body, every other request through
    ``job.subrequest``; a main-frame navigation to another document is refused."""
    served = False

    async def route(route: Any) -> None:
        nonlocal served
        request = route.request
        if request.is_navigation_request() and request.frame == page.main_frame:
            if served:
                job.refused.append("another document")
                await route.abort("blockedbyclient")
                return
            served = True
            await route.fulfill(status=job.status, headers=job.headers, body=job.body)
            return
        args = (request.url, request.method, request.resource_type)
        answer = await asyncio.to_thread(job.subrequest, *args)
        if answer is None:
            await route.abort("blockedbyclient")
        else:
            status, headers, body = answer
            await route.fulfill(status=status, headers=headers, body=body)

    return route


def rss_mb() -> float:
    """MiB of memory of this process's descendants (the Playwright driver and Chromium's
    processes): their PSS, as RSS counts the pages they share once per process (a fresh
    browser: ~770 MiB of RSS, ~250 of PSS). Walked from /proc/PID/task/TID/children, so only
    our own processes are read (a scan of all /proc cost a loaded machine's render loop half
    its pages/s)."""
    total, todo = 0, _children(os.getpid())
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            total += int(rollup.split("\nPss:", 1)[1].split()[0])  # kB
        todo += _children(pid)
    return total / 1024


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            out += [int(c) for c in f.read_text().split()]
    return out
