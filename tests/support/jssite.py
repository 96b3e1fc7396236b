"""Local sites whose links exist only after JavaScript runs, for the render tests and
bench/render.py: a binary tree of pages ``/``, ``/p1``, ``/p2``... where page i links to pages
2i+1 and 2i+2. On a JS host each page's links are built in the browser, by one of three means
in turn: a script that inserts them, a script file that fetches them (XHR, ``/api/links``),
and a ``setTimeout``. A plain host has them in its HTML."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.support.sitegen import Handler

INSERT = (
    "function put(hs){for(const h of hs){const a=document.createElement('a');"
    "a.href=h;a.textContent=h;document.body.appendChild(a)}}"
)


def path_of(i: int) -> str:
    return "/" if i == 0 else f"/p{i}"


def children(i: int, n: int) -> list[str]:
    return [path_of(c) for c in (2 * i + 1, 2 * i + 2) if c < n]


def page_body(i: int, n: int, js: bool, extra: str = "") -> bytes:
    kids = children(i, n)
    text = f"<p>Page {i} of a generated site, with some words in it.</p>"
    if not js:
        links = "".join(f'<a href="{h}">{h}</a>\n' for h in kids)
        body = f"{text}{links}"
    elif i % 3 == 0:
        body = f"{text}<script>{INSERT};put({json.dumps(kids)})</script>"
    elif i % 3 == 1:
        body = f'{text}<script>var PAGE={i}</script><script src="/app.js"></script>'
    else:
        body = f"{text}<script>{INSERT};setTimeout(()=>put({json.dumps(kids)}),300)</script>"
    html = f"<!DOCTYPE html><html><head><title>p{i}</title></head><body>{body}{extra}</body></html>"
    return html.encode()


APP_JS = (INSERT + ";fetch('/api/links?page='+PAGE).then(r=>r.json()).then(put)").encode()


def routes(
    n: int, js: bool, extra: Callable[[int], str] = lambda i: "", api_delay: float = 0.0
) -> dict[str, Callable[[Handler], None]]:
    """Extra routes for a ``SiteServer``: the ``n`` pages, the script and the links API (its
    answers ``api_delay`` s late: renders that take a while)."""

    def page(i: int) -> Callable[[Handler], None]:
        return lambda h: h.send_body(200, page_body(i, n, js, extra(i)))

    def api(h: Handler) -> None:
        time.sleep(api_delay)
        i = int(h.query.partition("=")[2] or 0)
        h.send_body(200, json.dumps(children(i, n)).encode(), "application/json")

    out: dict[str, Any] = {path_of(i): page(i) for i in range(n)}
    out["/app.js"] = lambda h: h.send_body(200, APP_JS, "application/javascript")
    out["/api/links"] = api
    return out


def all_urls(base: str, n: int) -> set[str]:
    return {base + path_of(i) for i in range(n)}
