"""When a rendered page is done (worker/render/browser.py): once loaded, it has had no request open,
no response and no short timer run for ``render_quiet`` s, or it has had ``render_settle`` s to
get there, and is taken as it is.

The time its subrequests spent waiting for their hosts' tokens and send-gate slots
(render_guard.py) does not count against ``render_settle``: that is the crawl's politeness
holding the page, not a slow page. Counted, an XHR that waited longer than the settle (a
host's interval longer than it, or a loaded machine's late slots) was cut off, and the links
it would have inserted were lost. The render deadline still bounds everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

#: In every page before its scripts: ``window.__crawlerQuiet(ms)`` resolves once no short
#: ``setTimeout`` is pending and none has run for ``ms`` (looked at in the page: no round trip
#: to the browser per look, which cost CPU in three processes). The page's own
#: scripts may see the wrapper; they can only make the render wait less (then it is taken as
#: it is) or more (up to ``render_settle``).
TIMERS_JS = """(() => {
  const pending = new Set(), set = window.setTimeout, clear = window.clearTimeout;
  let last = performance.now();
  window.setTimeout = function (fn, ms, ...args) {
    if (typeof fn !== 'function' || (+ms || 0) > LIMIT) return set(fn, ms, ...args);
    const id = set(function () {
      pending.delete(id); last = performance.now(); return fn.apply(this, args);
    }, ms);
    pending.add(id);
    return id;
  };
  window.clearTimeout = function (id) { pending.delete(id); return clear(id); };
  Object.defineProperty(window, '__crawlerQuiet', {
    value: (quiet) => new Promise((done) => {
      const look = () => (!pending.size && performance.now() - last >= quiet ? done() : set(look, 20));
      look();
    })
  });
})();"""
#: Seconds between two looks at a loaded page's quiet.
POLL = 0.05


class Traffic:
    """A page's requests open now, and when one last began or ended (monotonic)."""

    def __init__(self, page: Any) -> None:
        self.open, self.last = 0, asyncio.get_running_loop().time()
        page.on("request", lambda _: self._moved(1))
        page.on("requestfinished", lambda _: self._moved(-1))
        page.on("requestfailed", lambda _: self._moved(-1))

    def _moved(self, by: int) -> None:
        self.open, self.last = max(0, self.open + by), asyncio.get_running_loop().time()


async def _quiet(page: Any, traffic: Traffic, quiet_s: float) -> None:
    """Until the loaded page has had no request open, no response and no short timer run
    for ``quiet_s``: links inserted at load, after an XHR or a short ``setTimeout``
    are in the DOM, without Playwright's fixed 500 ms of ``networkidle``."""
    loop = asyncio.get_running_loop()
    while True:
        while traffic.open or loop.time() - traffic.last < quiet_s:
            await asyncio.sleep(POLL)
        quiet = "q => window.__crawlerQuiet && window.__crawlerQuiet(q)"
        await page.evaluate(quiet, quiet_s * 1000)  # a timer's fetch is seen by then
        if traffic.open == 0 and loop.time() - traffic.last >= quiet_s:
            return


def timers_js(timer_wait: float) -> str:
    return TIMERS_JS.replace("LIMIT", str(int(timer_wait * 1000)))


async def settled(
    page: Any, traffic: Traffic, settle: float, quiet_s: float, held: Callable[[], float]
) -> None:
    """:func:`_quiet`, within ``settle`` s from now plus what ``held()`` (seconds the page's
    subrequests waited for their hosts) grows by meanwhile; past that, returns (the page is
    taken as it is). Its errors raise."""
    loop = asyncio.get_running_loop()
    end = loop.time() + settle - held()  # what was held before now was not the settle's
    task = asyncio.ensure_future(_quiet(page, traffic, quiet_s))
    try:
        while not task.done():
            left = end + held() - loop.time()
            if left <= 0:
                return
            await asyncio.wait({task}, timeout=min(left, POLL * 4))
        task.result()
    finally:
        task.cancel()
