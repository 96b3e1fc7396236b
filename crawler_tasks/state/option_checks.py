"""Checks of crawl options (state/options.py) by kind and range: the values a CrawlOptions is
built from (types, ranges, rates, hooks, request headers and secrets), refused with one line
before anything of the crawl is written; and what is derived from the per-crawl request and
render limits: the seconds after which the repair publishes a lost fetch again
(:func:`reap_after`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import ConfigError, shown
from ..limits import number, range_problem

#: Seconds a request (``timeout``) or a page's render (``render_deadline``) may be given: a
#: task holds a worker thread that long; with both, it stays below the broker's default
#: visibility_timeout (600 s), past which a running task's message would be handed out again.
MAX_REQUEST_SECONDS = 300.0
#: Playwright's resource types (``Request.resource_type``), which ``render_block`` names.
RESOURCE_TYPES = frozenset(
    [
        "document",
        "stylesheet",
        "image",
        "media",
        "font",
        "script",
        "texttrack",
        "xhr",
        "fetch",
        "eventsource",
        "websocket",
        "manifest",
        "other",
    ]
)

_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "tuple": (
        "a list of strings",
        lambda v: isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v),
    ),
    "dict": ("a mapping", lambda v: isinstance(v, dict)),
}


def check_types(cls: Any, data: dict[str, Any]) -> None:
    """Each value of the type its field of ``cls`` declares: a user's value (a schedule's
    TOML, JSON from ``--option``) of the wrong type is refused when the crawl is created,
    not by a worker."""
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, kinds = data[f.name], [k.strip() for k in str(f.type).split("|")]
        if value is None and "None" in kinds:
            continue
        what, ok = _KINDS[kinds[0].split("[")[0]]
        if not ok(value):
            raise ConfigError(f"{f.name} must be {what}, not {value!r}")


def check_limits(
    timeout: float, render_deadline: float, subrequests: int, render_bytes: int, block: str
) -> None:
    """The per-crawl request and render limits: seconds in (0, MAX_REQUEST_SECONDS], counts
    and bytes >= 0, known resource types to block."""
    for name, value in (("timeout", timeout), ("render_deadline", render_deadline)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be seconds, not {value!r}")
        if not 0 < value <= MAX_REQUEST_SECONDS:
            limit = f"{MAX_REQUEST_SECONDS:g}"
            raise ConfigError(f"{name} must be seconds in (0, {limit}], not {value}")
    for name, count in (
        ("render_max_subrequests", subrequests),
        ("render_max_bytes", render_bytes),
    ):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"{name} must be an integer >= 0, not {count!r}")
    unknown = render_blocked(block) - RESOURCE_TYPES
    if unknown:
        known = ", ".join(sorted(RESOURCE_TYPES))
        raise ConfigError(f"render_block: unknown resource types {sorted(unknown)} ({known})")


def render_blocked(text: str) -> frozenset[str]:
    """``render_block``'s resource types ("image,font,media")."""
    return frozenset(t.strip() for t in text.split(",") if t.strip())


class Limits(Protocol):
    """The options :func:`reap_after` reads (a CrawlOptions)."""

    @property
    def timeout(self) -> float: ...
    @property
    def render_deadline(self) -> float: ...
    @property
    def render(self) -> str: ...
    @property
    def render_hosts(self) -> dict[str, str]: ...


def reap_after(visibility_timeout: float, opts: Limits) -> float:
    """Seconds after its release a URL that no worker has finished counts as lost (its message
    never reached a worker) and is published again: the broker's redelivery delay plus the
    longest one task of the crawl may run, its request ``timeout`` and, for a crawl that
    renders, ``render_deadline`` after it. Derived from the crawl's own limits: a crawl given
    a long timeout is not published twice while its request still runs."""
    renders = opts.render != "never" or any(m != "never" for m in opts.render_hosts.values())
    return visibility_timeout + opts.timeout + (opts.render_deadline if renders else 0.0)


# --- the values of options, checked when a CrawlOptions is built (options.py) ------------
def rates_of(rates: Any) -> dict[str, float]:
    if not isinstance(rates, dict):
        raise ConfigError(f"rates must map hosts to requests/s, not {rates!r}")
    out = {}
    for host, r in rates.items():
        out[str(host).lower()] = number_of(f"rate for {host!r}", r)
    return out


def number_of(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{what} must be a number, not {value!r}")
    try:  # "1e400" is not "inf" (limits.number)
        return number(value) if isinstance(value, str) else float(value)
    except (ValueError, OverflowError):
        raise ConfigError(f"{what} must be a number up to its limit, not {value!r}") from None


_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def check_hooks(o: Any) -> None:
    """Hooks travel as names (never pickles) and are imported by the workers: only the form
    is checked here, the starting process need not be able to import them."""
    if o.extract is not None and not (isinstance(o.extract, str) and _DOTTED.match(o.extract)):
        raise ConfigError(f"extract must be 'package.module:function', not {o.extract!r}")
    if o.on_item is not None and not (isinstance(o.on_item, str) and o.on_item.strip()):
        raise ConfigError(f"on_item must be a Celery task name, not {o.on_item!r}")


_ENV_REF = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie")
_OWN_HEADERS = ("host", "content-length", "transfer-encoding", "user-agent", "connection")


def check_requests(o: Any) -> None:
    """Request settings: strings, secrets only as env:NAME (never their values)."""
    if not _str_map(o.headers):
        raise ConfigError("headers must map header names to strings")
    for name, value in o.headers.items():
        if name.lower() in _OWN_HEADERS:
            raise ConfigError(
                f"header {shown(name)} is the crawler's own (user_agent is an option)"
            )
        if name.lower() in _SECRET_HEADERS and not _ENV_REF.match(value):
            raise ConfigError(f"header {shown(name)} carries a secret: give it as 'env:NAME'")
    # A cookie is a session's secret as often as not: its value stays in the workers'
    # environment, as auth's and a secret header's do (clear values were stored in Redis).
    jars: list[Any] = list(o.cookies.values()) if isinstance(o.cookies, dict) else [None]
    if not all(_str_map(jar) and all(map(_ENV_REF.match, jar.values())) for jar in jars):
        raise ConfigError(
            "cookies must map hosts to {name: 'env:NAME'}: a cookie's value is read from the "
            "workers' environment (--cookie HOST:NAME=env:NAME, with NAME set on every worker)"
        )
    if not _str_map(o.auth) or not all(_ENV_REF.match(v) for v in o.auth.values()):
        raise ConfigError("auth must map hosts to 'env:NAME' (NAME holding user:password)")
    p = o.proxy
    if p is not None and not (isinstance(p, str) and (_ENV_REF.match(p) or _plain_proxy(p))):
        raise ConfigError("proxy must be http(s)://host:port, or 'env:NAME' if it has a password")


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _plain_proxy(url: str) -> bool:
    scheme, sep, rest = url.partition("://")
    return scheme in ("http", "https") and bool(sep) and "@" not in rest and bool(rest)


def check_values(o: Any, limits: Mapping[str, tuple[float, float, bool]]) -> None:
    """Ranges that would make a crawl hang or misbehave later, refused when it is created:
    ``limits`` is every numeric option's ``(lowest, highest, inf allowed)``
    (options.option_limits)."""
    fields = {f.name: f for f in dataclasses.fields(o)}
    if not 0 < o.min_interval <= o.max_interval:
        raise ConfigError(
            f"min_interval ({o.min_interval}) must be > 0 and <= max_interval ({o.max_interval})"
        )
    for name, (low, high, infinite) in limits.items():
        value = getattr(o, name)
        if value is None and name == "max_depth":
            continue
        whole = "int" in str(fields[name].type)
        if whole and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{name} must be an integer, not {value!r}")
        why = range_problem(name, value, low, high, infinite)
        if why:
            raise ConfigError(why)
    low, high, _ = limits["rate"]
    for host, r in o.rates.items():
        why = range_problem(f"rate for {host!r}", r, low, high, infinite_ok=True)
        if why:
            raise ConfigError(why)
    check_limits(
        o.timeout, o.render_deadline, o.render_max_subrequests, o.render_max_bytes, o.render_block
    )
    for pattern in (*o.include, *o.exclude):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"invalid regex {pattern!r}: {exc}") from None
