"""What ``crawler crawl`` does once its options are checked and its workers are there (surface/
crawl_command.py): start the crawl, show its progress on stderr until it ends (Ctrl-C cancels
it), and hand back its summary with what its reader needs besides."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from ..settings import Settings
from ..state.options import CrawlOptions
from ..state.summary import Notes
from . import cli_common as cli
from .export import output_place

if TYPE_CHECKING:
    from ..state.summary import Summary
    from .crawl import Crawl


def run(
    settings: Settings,
    opts: CrawlOptions,
    no_wait: bool,
    more_seeds: Iterable[str] = (),
    as_json: bool = False,
) -> tuple[Summary | None, bool]:
    from rich.console import Console

    from .crawl import launch
    from .display import watch

    _warn_if_running(settings, opts)
    handle = cli.patient(launch(opts, settings=settings, more_seeds=more_seeds))
    where = output_place(handle)
    click.echo(f"crawl {handle.id} started; output in {where}", err=True)
    if no_wait:
        started = {"crawl_id": handle.id, "status": "running", "output_dir": str(where)}
        click.echo(cli.dumps(started) if as_json else handle.id)
        return None, False
    _say_pace(settings, opts)
    interrupted = False
    try:
        # Progress on stderr: stdout carries only the summary (``--json`` pipes cleanly).
        watch(handle, console=Console(stderr=True))
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: cancelling crawl {handle.id}", err=True)
        handle.cancel()
        handle.wait(timeout=30)
        interrupted = True
    else:
        _uploaded(handle)
    return _noted(handle, settings), interrupted


def _uploaded(handle: Crawl, patience: float = 120.0) -> None:
    """An s3:// crawl's last segments are uploaded within seconds of its end: waited for, so
    that an export right after finds every record (said once if it takes a moment)."""
    from ..state import objects, workers
    from ..state.segments import Segments

    if not objects.is_url(handle.options.output):
        return
    segments, told = Segments(handle.client, handle.keys, handle.id), False
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        alive = workers.alive(handle.client, handle.keys, handle.settings.worker_dead_seconds)
        waiting = segments.waiting(alive)
        if not waiting.waiting or waiting.stranded:
            return  # uploaded, or nobody can upload them now (status says so)
        if not told:
            click.echo(f"crawl {handle.id}: {waiting.line()}", err=True)
            told = True
        time.sleep(0.5)


def _noted(handle: Crawl, settings: Settings) -> Summary:
    """The crawl's summary, with what its reader needs besides: where the files are, why a
    TLS failure happened though this command trusts the CA, its first failure and extraction
    error with their URLs (from the dead letters)."""
    summary = handle.read_summary()
    tls_hint = None
    if settings.ca_bundle and summary.tls_error_why:
        # This command trusts the CA; the workers that failed the handshake do not.
        tls_hint = (
            f"this command has CRAWLER_CA_BUNDLE={settings.ca_bundle}, the workers that "
            "fetched do not: start every worker with it too"
        )
    dead = handle.failed()
    first_extract_error = first_failure = None
    first = next((f for f in dead if f.get("extract_error")), None)
    if first is not None:
        first_extract_error = f"{first['url']}: {first['extract_error']}"
    first = next((f for f in dead if f.get("error")), None)
    if first is not None:  # its cause, not only a count by reason (a browser that won't start)
        why = f": {first['detail']}" if first.get("detail") else ""
        first_failure = f"{first['url']}: {first['error']}{why}"
    notes = Notes(
        output_dir=output_place(handle),  # the workers' place, once they wrote
        tls_hint=tls_hint,
        first_extract_error=first_extract_error,
        first_failure=first_failure,
    )
    return replace(summary, notes=notes)


def _warn_if_running(settings: Settings, opts: CrawlOptions) -> None:
    """The same command run twice (a --no-wait repeated) would crawl one site twice at once:
    allowed (a recrawl may be meant), but said."""
    from ..state.registry import same_seeds_running
    from ..state.store import RedisHandle

    r = RedisHandle.connect(cli.client_for(settings), settings.key_prefix)
    for crawl_id in same_seeds_running(r, opts.seeds):
        click.echo(
            f"warning: crawl {crawl_id} of the same seeds is still running; this is another "
            f"(`crawler cancel {crawl_id}` stops that one)",
            err=True,
        )


def _say_pace(settings: Settings, opts: CrawlOptions) -> None:
    """Once, when the user chose no pace: what politeness lets each seed host get (the crawl's
    rate, or ``crawler set-rate``'s under a ``set-ceiling``), and how to raise it."""
    from ..state.keys import Keys
    from ..state.paces import pace_words, seed_paces

    if opts.rates or ParameterSource.COMMANDLINE in _rate_sources():
        return
    paces = seed_paces(cli.client_for(settings), Keys(settings.key_prefix), opts)
    named = [f"{pace_words(p.rate)} for {p.host} ({p.why()})" for p in paces[:3]]
    if len(paces) > 3:
        named.append(f"{len(paces) - 3} more seed hosts by set-rate or set-ceiling")
    others = "per other host" if named else "per host"
    named.append(f"{pace_words(opts.rate)} {others}")
    click.echo(
        f"pace: {'; '.join(named)} (politeness; robots.txt Crawl-delay may lower it). On a "
        "site of your own raise it: --host-rate HOST=10 (or --default-rate)",
        err=True,
    )


def _rate_sources() -> set[ParameterSource | None]:
    ctx = click.get_current_context()
    return {ctx.get_parameter_source(name) for name in ("default_rate", "rates")}
