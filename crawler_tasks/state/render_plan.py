"""Which fetched pages are rendered by a browser (the ``render`` option, worker/visit/render_step.py).

``never`` (the default) and ``always`` need nothing shared. Under ``auto`` a page without any
script is parsed as fetched (rendering it could add nothing); for the others it decides per
host from
evidence every worker shares (render_plan.lua, one Redis hash per crawl): the first
:data:`SAMPLE` pages of a host are rendered and each render is compared with the raw parse of
the same page (:func:`rendering_added`); a host where rendering added in-scope links or much
text has every page rendered, one where it did not has its pages parsed as fetched, with one
page in :data:`SPOT_CHECK` still rendered so that a host whose later pages need a browser is
found. A rendering host whose last :data:`STOP_AFTER` renders added nothing goes back to raw.
A page queued for render while its host was sampling is looked at again when its render starts
(:meth:`RenderPlan.recheck`): the first :data:`SAMPLE` to start are the sample; a later one
waits for the sample's verdict: rendered if the host has been decided "render", parsed from
its fetched body without a browser if "raw" (a JS host is never "raw" while renders add links
to it). Each URL's verdict is counted once (a set of told URLs beside the plan): a render
redelivered after it was told is not a second sample, and a host's renders never exceed its
pages.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import redis

from ..errors import ConfigError
from ..web.urls import host_of
from .formats import RenderAsk, RenderMode, RenderRecheck, RenderVerdict
from .keys import CrawlKeys
from .scripts import Scripts

#: Pages of a new host rendered (and compared) before ``auto`` decides it needs no rendering.
SAMPLE = 2
#: Under ``auto``, one page in this many of a host parsed raw is rendered anyway.
SPOT_CHECK = 50
#: Renders in a row that add nothing after which a rendering host goes back to raw parsing.
STOP_AFTER = 20
#: Text a render must add (characters, and times the raw page's) to count as adding content.
TEXT_GAIN_CHARS, TEXT_GAIN_RATIO = 200, 1.5

_MODES = tuple(m.value for m in RenderMode)
#: Any script a browser would run: an element, or an inline event handler (onload=...).
_SCRIPT = re.compile(rb"<script|\son[a-z]+\s*=", re.I)


def check_render(mode: Any, hosts: Any) -> None:
    """The ``render`` and ``render_hosts`` options, refused when the crawl is created."""
    if mode not in _MODES:
        raise ConfigError(f"render must be one of {_MODES}, not {mode!r}")
    if not isinstance(hosts, dict) or not all(v in _MODES for v in hosts.values()):
        raise ConfigError(f"render_hosts must map hosts to one of {_MODES}, not {hosts!r}")


def mode_for(default: str, hosts: dict[str, str], url: str) -> RenderMode:
    """The render mode of ``url``'s host: its ``render_hosts`` entry, else the crawl's."""
    return RenderMode(hosts.get(host_of(url), default))


def renders(default: str, hosts: dict[str, str]) -> bool:
    """Whether a crawl may render some of its pages: their browsers' subrequests then share
    their hosts' send gates with the pages (worker/runtime/send_gate.py)."""
    return default != RenderMode.NEVER or any(m != RenderMode.NEVER for m in hosts.values())


def rendering_added(
    raw_links: set[str], rendered_links: set[str], raw_text: int, text: int
) -> bool:
    """Whether a render found what the raw page lacks: an in-scope link (both sets hold the
    links admission would judge), or much more text."""
    if rendered_links - raw_links:
        return True
    return text >= TEXT_GAIN_CHARS + raw_text * TEXT_GAIN_RATIO


class RenderPlan:
    """One crawl's per-host render decisions (``auto``) and their evidence."""

    def __init__(self, client: redis.Redis, ck: CrawlKeys, scripts: Scripts) -> None:
        self.client, self.key, self.scripts = client, ck.render_plan, scripts
        self.told = ck.render_told

    def wants(self, default: str, hosts: dict[str, str], url: str, body: bytes) -> RenderAsk:
        """Render this fetched page (a falsy answer: no)? Under ``auto``, a page without a
        script is not (nothing would run); any other counts for its host's plan."""
        if default == "never" and not hosts:  # the default: not even the URL is looked at
            return RenderAsk.RAW
        mode = mode_for(default, hosts, url)
        if mode is not RenderMode.AUTO:
            return RenderAsk.FIRM if mode is RenderMode.ALWAYS else RenderAsk.RAW
        if _SCRIPT.search(body) is None:
            return RenderAsk.RAW
        return RenderAsk(int(self._call("ask", host_of(url))))

    def recheck(self, url: str) -> RenderRecheck:
        """A page asked while its host was sampling, about to be rendered: render it (the
        host renders, or it is one of the sample), parse it raw (decided "raw" since), or
        wait (the sample is being rendered)?"""
        return RenderRecheck(int(self._call("recheck", host_of(url))))

    def tell(self, url: str, added: bool) -> RenderVerdict:
        """A render of ``url`` under ``auto`` did (not) add something: the host's new mode.
        Counted once per URL: a second verdict of ``url`` (its render redelivered after the
        first was told) changes nothing, so the host's ``renders`` never exceed its pages."""
        raw = self._call("tell", host_of(url), 1 if added else 0, _digest(url))
        return RenderVerdict(raw.decode() if isinstance(raw, bytes) else str(raw))

    def _call(self, op: str, host: str, *more: int | bytes) -> Any:
        args = [op, host, SAMPLE, SPOT_CHECK, STOP_AFTER, *more]
        keys = [self.key, self.told]
        return self.scripts.render_plan(keys=keys, args=args, client=self.client)

    def hosts(self) -> dict[str, dict[str, Any]]:
        """Per host: its mode, pages seen, renders asked and done, renders that added."""
        out: dict[str, dict[str, Any]] = {}
        for field, value in self.client.hgetall(self.key).items():
            host, _, name = field.decode().rpartition("|")
            text = value.decode()
            out.setdefault(host, {})[name] = text if name == "mode" else int(text)
        return out

    def states(self, default: str, hosts: dict[str, str], names: list[str]) -> dict[str, str]:
        """Each of ``names``'s render state for the dashboard's host table (:func:`label`);
        none for a crawl that never renders. One read of the plan, whatever the hosts."""
        if default == "never" and not hosts:
            return {}
        auto = RenderMode.AUTO.value
        plan = self.hosts() if auto in (default, *hosts.values()) else {}
        out = {}
        for name in names:
            mode = RenderMode(hosts.get(name, default))
            out[name] = label(plan.get(name)) if mode is RenderMode.AUTO else mode.value
        return out


def _digest(url: str) -> bytes:
    """``url`` as a member of the told set: 8 bytes (odds of any collision among a million
    rendered URLs: 1 in 4*10^7; one costs a page's verdict, never the page)."""
    return hashlib.blake2b(url.encode("utf-8", "surrogateescape"), digest_size=8).digest()


def label(entry: dict[str, Any] | None) -> str:
    """One ``auto`` host's state: "render", "raw", "sampling 1/2" (renders told of the
    sample), or "auto" while none of its pages with a script has been fetched."""
    if not entry:
        return RenderMode.AUTO.value
    mode = str(entry.get("mode", RenderVerdict.SAMPLING.value))
    if mode == RenderVerdict.SAMPLING.value:
        return f"{mode} {entry.get('renders', 0)}/{SAMPLE}"
    return mode
