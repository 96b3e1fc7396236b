"""Users' extraction hooks: a function named per crawl (``extract="pkg.mod:func"``), imported
by the worker that parses the page (a fetch worker for pages up to ``inline_parse_bytes``, a
parse worker for larger ones: every worker must be able to import it) and called once per
parsed HTML page. Written as a Scrapy callback is::

    from crawler_tasks.worker.runtime.hooks import Page

    def article(page: Page):
        yield {"title": page.css("h1::text").get(), "tags": page.css(".tag::text").getall()}
        yield from page.follow_all(css="a.next")       # or: yield page.follow(href)

``page.css`` / ``page.xpath`` are Scrapy's selectors (parsel); ``page.tree`` is the lxml.html
tree (``text_content()``, ``cssselect()``, ``iterlinks()``, ``findtext()``).

The hook returns or yields its items (JSON-serialisable dicts: a list, a generator, one dict,
or None) and links to follow (``page.follow(...)``), or returns a :class:`Result` that may
also add links to follow (relative ones resolve against the page's final URL) and drop links
the crawler found. Added links go through scope, robots.txt,
dedupe, limits and politeness like any other link; ``page.links`` is a tuple, not to be
changed in place. Items go to ``items-*.jsonl`` (one line per item:
``{"url": page URL, "item": {...}, "rid": ...}``) written together with the page's record, so
each page's items are there exactly once, also after a worker dies and the page is parsed again.

A hook that raises, returns something else, or runs longer than the crawl's
``extract_timeout`` (seconds) gives the page ``extract_error`` (``"ValueError: message"`` or
``"timeout"``) in its record and the dead-letter list; the page is recorded with the crawler's
own links and no items. A cut-off hook cannot be stopped from outside in Python: its thread
runs on in the background to its end, and what it returns is dropped.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urljoin

import parsel

from ...web.urls import resolve

#: JSON bytes of one page's items at most: they wait in Redis until written (recorder.py).
MAX_ITEMS_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Page:
    """What a hook sees of one fetched HTML page."""

    url: str  #: the URL as admitted (the record's ``url``)
    final_url: str  #: after redirects; links resolve against it
    status: int
    headers: Mapping[str, str]  #: response headers (Set-Cookie left out), lower-case names
    depth: int
    crawl_id: str
    text: str  #: the decoded HTML
    tree: Any  #: the page's lxml.html tree (lxml.html.HtmlElement; None for an empty body)
    links: tuple[str, ...]  #: the links the crawler found: normalised, in document order
    title: str | None = None
    canonical: str | None = None

    @cached_property
    def selector(self) -> parsel.Selector:
        """Scrapy's selector (parsel) over the same tree: built once, on first use."""
        if self.tree is None:
            return parsel.Selector(text="<html></html>", base_url=self.final_url)
        return parsel.Selector(root=self.tree, type="html", base_url=self.final_url)

    def css(self, query: str) -> parsel.SelectorList[parsel.Selector]:
        """As Scrapy's ``response.css``: ``page.css("h1::text").get()``."""
        return self.selector.css(query)

    def xpath(self, query: str, **variables: Any) -> parsel.SelectorList[parsel.Selector]:
        """As Scrapy's ``response.xpath``: ``page.xpath("//a/@href").getall()``."""
        return self.selector.xpath(query, **variables)

    def urljoin(self, href: str) -> str:
        return urljoin(self.final_url, href)

    def follow(self, link: str | parsel.Selector) -> Follow:
        """A link to follow, to yield from the hook (Scrapy's ``response.follow``): a URL,
        relative or absolute, or a selector of an ``<a>`` element or of an ``href``."""
        if isinstance(link, parsel.Selector):
            if isinstance(link.root, str):  # an attribute or text: "a::attr(href)", "@href"
                link = link.root
            elif "href" in link.attrib:
                link = link.attrib["href"]
            else:
                raise ValueError(f"follow() takes <a>/<link> elements or URLs, not {link.get()!r}")
        return Follow(self.urljoin(str(link).strip()))

    def follow_all(
        self, urls: Iterable[str | parsel.Selector] = (), *, css: str = "", xpath: str = ""
    ) -> list[Follow]:
        """:meth:`follow` for each of ``urls``, or of the elements ``css``/``xpath`` select."""
        chosen: list[Any] = list(urls)
        if css:
            chosen += self.css(css)
        if xpath:
            chosen += self.xpath(xpath)
        return [self.follow(link) for link in chosen]


@dataclass(frozen=True)
class Follow:
    """A link a hook yields (or returns among its items) to be followed."""

    url: str


@dataclass
class Result:
    items: list[dict[str, Any]] = field(default_factory=list)
    follow: list[str] = field(default_factory=list)  #: links to add (absolute or relative)
    drop: list[str] = field(default_factory=list)  #: links of ``page.links`` not to follow


@dataclass
class HookResult:
    """What became of one hook call."""

    links: list[str]
    items: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    #: The hook itself could not be had (its import failed, no such function): not the
    #: page's fault, and no other page will fare better in this worker.
    unusable: bool = False


class Hooks:
    """Hook functions imported by this process (one Context each), by dotted path."""

    def __init__(self) -> None:
        self._cache: dict[str, Callable[[Page], Any]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> Callable[[Page], Any]:
        """The function ``path`` names; an import failure raises (and is tried again next
        time: the user may be fixing it)."""
        with self._lock:
            fn = self._cache.get(path)
        if fn is None:
            module, _, name = path.partition(":")
            obj: Any = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
            if not callable(obj):
                raise TypeError(f"{path} is not callable")
            fn = obj
            with self._lock:
                self._cache[path] = fn
        return fn

    def run(self, path: str, page: Page, timeout: float) -> HookResult:
        """Call the hook on ``page`` in a thread of its own with a deadline; never raises."""
        box: dict[str, Any] = {}
        try:
            fn = self.get(path)  # imported once per process, outside the page's deadline
        except BaseException as exc:  # the user's module: anything at all
            error = f"cannot import the hook {path}: {_describe(exc)}"
            return HookResult(list(page.links), error=error[:500], unusable=True)

        def call() -> None:
            try:
                box["result"] = _check(fn(page), page)
            except BaseException as exc:  # the user's code: anything at all
                box["error"] = _describe(exc)

        thread = threading.Thread(target=call, name=f"hook {path}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            return HookResult(list(page.links), error="timeout")
        if "error" in box:
            return HookResult(list(page.links), error=box["error"])
        items, follow, drop = box["result"]
        return HookResult(_links(page, follow, drop), items)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _check(value: Any, page: Page) -> tuple[list[dict[str, Any]], list[str], set[str]]:
    """(items, links to add, links to drop) of a hook's return value, checked: runs in the
    hook's thread, so a generator's time counts against the deadline."""
    follow: Iterable[Any] = ()
    drop: Iterable[Any] = ()
    if isinstance(value, Result):
        value, follow, drop = value.items, value.follow, value.drop
    if value is None:
        items: list[Any] = []
    elif isinstance(value, dict):
        items = [value]
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"a hook returns items (dicts) or a Result, not {type(value).__name__}")
    else:
        items = list(value)
    # Scrapy-style: links yielded among the items (page.follow(...)).
    follow = [*follow, *(i.url for i in items if isinstance(i, Follow))]
    items = [i for i in items if not isinstance(i, Follow)]
    size = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TypeError(f"item {i} is a {type(item).__name__}, not a dict")
        size += len(json.dumps(item, ensure_ascii=False))  # TypeError if not JSON
        if size > MAX_ITEMS_BYTES:
            raise ValueError(f"items of one page exceed {MAX_ITEMS_BYTES} bytes of JSON")
    for link in (*follow, *drop):
        if not isinstance(link, str):
            raise TypeError(f"links are strings, not {type(link).__name__}")
    return items, list(follow), set(drop)


def _links(page: Page, follow: list[str], drop: set[str]) -> list[str]:
    """The page's links without ``drop`` (as given or resolved), then ``follow``, resolved
    and normalised; an href that is no http(s) URL is left out."""
    gone = drop | {resolve(page.final_url, d) for d in drop}
    kept = {link: None for link in page.links if link not in gone}
    for href in follow:
        link = resolve(page.final_url, href)
        if link is not None:
            kept.setdefault(link, None)
    return list(kept)
