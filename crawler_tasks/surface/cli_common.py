"""What every ``crawler`` command shares: the broker option, connecting to it, and turning a
user's mistake into one line on stderr with exit code 2 (never a traceback)."""

from __future__ import annotations

import json
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import click
import redis
from click.decorators import FC

from ..errors import ConfigError, shown
from ..redaction import redact
from ..settings import Settings
from ..state import connection
from ..state.options import INTERNAL

T = TypeVar("T")

#: Exit code of a command given bad input or pointed at a broker it cannot use.
USAGE = 2
#: Exit code after Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130
#: Exit status after SIGTERM (128 + 15, as a shell reports it).
TERMINATED = 143


def _broker_errors() -> tuple[type[BaseException], ...]:
    """kombu's OperationalError, if kombu was imported: a command that never reached kombu
    (most only read Redis) cannot raise it, and importing kombu costs a tenth of their start."""
    kombu_errors = sys.modules.get("kombu.exceptions")
    return (kombu_errors.OperationalError,) if kombu_errors is not None else ()


broker_option = click.option(
    "--broker", help="Broker/state Redis URL (default: $CRAWLER_BROKER_URL)."
)


option_items = click.option(
    "--option",
    "option_items",
    multiple=True,
    metavar="KEY=JSON",
    help="Any crawl option, VALUE as JSON or a bare word (a string); repeatable.",
)


def json_option(help: str = "Print the result as one JSON value on stdout.") -> Callable[[FC], FC]:
    """``--json`` (parameter ``as_json``) of every command that prints a result: what it says
    for a person becomes one JSON object or array on stdout (a watching command: one object a
    line). Mistakes stay one line on stderr and exit 2, as without it."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def say(as_json: bool, result: Any, text: str) -> None:
    """A command's result: ``result`` as one line of JSON, or ``text`` for a person."""
    click.echo(dumps(result) if as_json else text)


def dumps(value: Any, indent: int | None = None) -> str:
    """JSON every reader parses: an infinite rate is the string "inf" (JSON has no Infinity:
    json.dumps would write the bare word, which strict parsers refuse), anything else not
    JSON (a datetime) its text."""
    return json.dumps(replace_non_finite(value, _inf_word), default=str, indent=indent)


def _inf_word(x: float) -> Any:
    return "inf" if x > 0 else "-inf" if x < 0 else x


def replace_non_finite(value: Any, replace: Callable[[float], Any]) -> Any:
    """``value`` (dicts, lists and tuples walked) with each float that is not finite replaced
    by ``replace(it)``: JSON has no Infinity or NaN. The CLI writes an unlimited rate as the
    word users type ("inf"), the dashboard's API as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return replace(value)
    if isinstance(value, dict):
        return {k: replace_non_finite(v, replace) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [replace_non_finite(v, replace) for v in value]
    return value


class Fail(click.ClickException):
    """A mistake of the user's: printed as one line, exit code 2."""

    exit_code = USAGE


def settings_for(broker: str | None) -> Settings:
    import dataclasses
    import os

    from ..environment import unknown_variables
    from .crawl import connect_settings

    for warning in unknown_variables((f.name for f in dataclasses.fields(Settings)), os.environ):
        click.echo(warning, err=True)
    try:
        settings = connect_settings(broker)
    except ValueError as exc:  # a CRAWLER_* variable that is not a number
        raise Fail(str(exc)) from None
    connection.check_redis_url(settings.state_url)
    return settings


def client_for(settings: Settings) -> redis.Redis:
    return connection.connect(settings.state_url, socket_connect_timeout=2, socket_timeout=10)


def patiently(settings: Settings, call: Callable[[], T]) -> T:
    """``call()`` (reads, or idempotent writes, of the crawl state), waited out while the state
    Redis is away (a cluster failing over, a server frozen or restarting) for as long as the
    workers wait (``redis_outage_wait``), saying so on stderr: the command goes on as the
    crawl does. After that the last error is raised (:func:`run_main`: exit 2)."""
    told = _Told()
    result = connection.wait_out(call, settings.redis_outage_wait, failed=told.failed, max_delay=1)
    told.ok()
    return result


def patient(crawl: T) -> T:
    """``crawl`` (a handle) whose methods are each called :func:`patiently`."""
    return cast(T, _Patient(crawl))


class _Patient:
    """A crawl handle whose methods (progress, summary, failed, cancel: reads and idempotent
    writes) are each called :func:`patiently`: what a watching command polls."""

    def __init__(self, crawl: Any) -> None:
        self._crawl = crawl

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._crawl, name)
        if not callable(attr):
            return attr
        settings = self._crawl.settings
        return lambda *args, **kwargs: patiently(settings, lambda: attr(*args, **kwargs))


class _Told:
    """:func:`patiently`'s words: one line when the state Redis stops answering, one when it
    answers again."""

    def __init__(self) -> None:
        self._lost: float | None = None

    def failed(self, exc: BaseException) -> None:
        if self._lost is None:
            self._lost = time.monotonic()
            click.echo(f"{state_lost(exc)}; retrying", err=True)

    def ok(self) -> None:
        if self._lost is not None:
            took, self._lost = time.monotonic() - self._lost, None
            click.echo(f"state Redis answers again after {took:.1f}s", err=True)


def state_lost(exc: BaseException) -> str:
    """``state node HOST:PORT lost`` when the error names the node, else what happened."""
    node = re.search(r"connecting to (\S+:\d+)", str(exc))
    if node:
        return f"state node {node[1]} lost"
    return f"state Redis not answering ({type(exc).__name__}: {one_line(str(exc))})"


def connect(broker: str | None) -> tuple[Settings, redis.Redis]:
    """Settings and a client of a Redis that answers, or one line saying why not."""
    from .probe import problem

    settings = settings_for(broker)
    why = problem(settings)
    if why is not None:
        raise Fail(why)
    client = client_for(settings)
    try:
        connection.check_broker(settings.broker_url, client)
    except ConfigError as exc:
        raise Fail(str(exc)) from None
    return settings, client


def handle(crawl_id: str, broker: str | None) -> Any:
    """A handle on an existing crawl; one line naming the broker searched for an id it does
    not know."""
    from ..errors import UnknownCrawl
    from .crawl import Crawl

    settings, client = connect(broker)
    crawl = Crawl(crawl_id, settings=settings, client=client)
    try:
        patiently(settings, lambda: crawl.options)
    except UnknownCrawl:
        raise Fail(
            f"no crawl {shown(crawl_id)} at {redact(settings.state_url)} (never started, or "
            "expired; another broker? --broker or CRAWLER_BROKER_URL)"
        ) from None
    return crawl


#: Characters of one error line at most: a backstop for input echoed whole by a message that
#: does not cut it itself (errors.shown); the start, which names the problem, is kept.
MAX_LINE = 1000


def one_line(message: str) -> str:
    line = " ".join(message.split())
    if len(line) <= MAX_LINE:
        return line
    return f"{line[:MAX_LINE]}...({len(line) - MAX_LINE:,} more characters)"


def run_main(run: Callable[[], Any]) -> NoReturn:
    """Run the CLI (``run``: click's main, not standalone); known failures become one line
    ``error: ...`` on stderr and exit code 2."""
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like an exit (temp dirs removed, local workers and a private Redis
        # stopped in order) instead of killing the process where it stands.
        signal.signal(signal.SIGTERM, _terminated)
    try:
        rv = run()
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(INTERRUPTED)
    except click.ClickException as exc:
        click.echo(f"error: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code if exc.exit_code != 1 else USAGE)
    except ConfigError as exc:
        click.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(USAGE)
    except _broker_errors() as exc:  # kombu's: the broker itself (a publish, an inspect)
        click.echo(f"error: broker connection lost: {one_line(str(exc))}", err=True)
        sys.exit(USAGE)
    except connection.UNAVAILABLE as exc:
        # The state Redis went away after the command had reached it, for longer than the
        # command waits (patiently), or under a command that does not wait.
        click.echo(f"error: {state_lost(exc)}: {one_line(str(exc))}", err=True)
        sys.exit(USAGE)
    sys.exit(rv if isinstance(rv, int) else 0)


def _terminated(signum: int, frame: Any) -> NoReturn:
    raise SystemExit(TERMINATED)


def parse_options(items: tuple[str, ...]) -> dict[str, Any]:
    """``--option KEY=VALUE`` items (``crawler crawl``, ``schedule add``) as crawl options:
    VALUE as JSON, or a bare word as a string (``priority=low``). Names and values are checked
    with the rest of the crawl's options."""
    opts = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise Fail(f"--option {item!r}: expected KEY=VALUE (VALUE as JSON or a word)")
        if key in INTERNAL:
            raise Fail(f"--option {key}: set by the crawler itself, not a crawl option")
        try:
            opts[key] = json.loads(value)
        except json.JSONDecodeError as exc:
            # A bracket or quote means JSON was meant: a typo must not become a string.
            if value.lstrip()[:1] in ("[", "{", '"'):
                raise Fail(f"--option {key}: bad JSON {value!r}: {exc.msg}") from None
            opts[key] = value
    return opts
