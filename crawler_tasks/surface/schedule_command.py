"""``crawler schedule add|list|remove``: periodic recrawls run by celery beat (registered by
``commands.COMMANDS``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigError, shown
from .cli_common import Fail, broker_option, connect, json_option, option_items, parse_options, say

if TYPE_CHECKING:
    from ..state.validators import Freshness


@click.group()
def schedule() -> None:
    """Periodic recrawls run by celery beat."""


def _schedules(broker: str | None) -> Any:
    from ..state.keys import Keys
    from ..state.schedules import Schedules
    from ..worker.process.app import make_app

    settings, client = connect(broker)
    return Schedules(make_app(settings), client, Keys(settings.key_prefix))


@schedule.command("add")
@click.argument("name")
@click.argument("seeds", nargs=-1, required=True)
@click.option("--every-hours", type=float)
@click.option("--every-seconds", type=float)
@click.option("--cron", help="'minute hour day month weekday'")
@click.option("--replace", is_flag=True, help="Replace a schedule of that name.")
@option_items
@broker_option
@json_option("Print the schedule added as one JSON object.")
def schedule_add(
    name: str,
    seeds: tuple[str, ...],
    every_hours: float | None,
    every_seconds: float | None,
    cron: str | None,
    replace: bool,
    option_items: tuple[str, ...],
    broker: str | None,
    as_json: bool,
) -> None:
    """Add schedule NAME crawling SEEDS (--replace: replace the one of that name)."""
    from ..state.schedules import Schedule

    opts = parse_options(option_items)
    try:  # the seeds and options checked, once, before anything is written
        item = Schedule(name, list(seeds), every_hours, every_seconds, cron, opts)
    except ConfigError as exc:
        raise Fail(str(exc)) from None
    try:
        _schedules(broker).add(item, replace=replace)
    except ConfigError as exc:  # ScheduleExists: nothing written
        raise Fail(str(exc)) from None
    say(as_json, {**described(item), "added": True}, f"schedule {name} added")


def described(item: Any) -> dict[str, Any]:
    """A schedule as ``--json`` gives it: its definition and its period in words."""
    return {
        "name": item.name,
        "period": period(item),
        "every_hours": item.every_hours,
        "every_seconds": item.every_seconds,
        "cron": item.cron,
        "seeds": list(item.seeds),
        "options": dict(item.options),
    }


def period(item: Any) -> str:
    if item.cron:
        return str(item.cron)
    return f"every {item.every_hours}h" if item.every_hours else f"every {item.every_seconds}s"


@schedule.command("list")
@broker_option
@json_option("One JSON array: each schedule, its last runs and the last one's freshness.")
def schedule_list(broker: str | None, as_json: bool) -> None:
    """Schedules and their most recent runs."""
    schedules = _schedules(broker)
    listed, lasts = [], []
    for item in schedules.all():
        runs = schedules.runs(item.name, 5)
        last = _freshness(schedules, runs, broker)
        lasts.append(last)
        shown = None if last is None else {"crawl_id": last[0], **last[1]._asdict()}
        listed.append({**described(item), "runs": runs, "last_run": shown})
    if as_json:
        say(True, listed, "")
        return
    for entry, last in zip(listed, lasts, strict=True):
        runs = ", ".join(entry["runs"]) or "-"
        click.echo(f"{entry['name']}\t{entry['period']}\t{' '.join(entry['seeds'])}\truns: {runs}")
        if last is not None:
            click.echo(f"  {fresh_line(*last)}")


def _freshness(schedules: Any, runs: list[str], broker: str | None) -> tuple[str, Freshness] | None:
    """The most recent run still known: its id and freshness figures (None if none is)."""
    from ..state.validators import freshness
    from .crawl import Crawl

    for run in runs:
        try:
            counters = Crawl(run, broker=broker, client=schedules.client).stats.counters()
        except KeyError:  # UnknownCrawl: expired
            continue
        return run, freshness(counters)
    return None


def fresh_line(run: str, f: Freshness) -> str:
    share = "-" if f.changed_share is None else f"{f.changed_share:.1%}"
    return (
        f"last run {run}: revisits={f.revisits} changed={share} not_due={f.not_due} "
        f"revisit_records={f.revisit_records} bytes_saved={f.revisit_bytes_saved}"
    )


@schedule.command("remove")
@click.argument("name")
@broker_option
@json_option()
def schedule_remove(name: str, broker: str | None, as_json: bool) -> None:
    """Remove schedule NAME (its past runs stay listed under their crawl ids)."""
    if not _schedules(broker).remove(name):
        raise Fail(f"no schedule {shown(name)}")
    say(as_json, {"name": name, "removed": True}, f"schedule {name} removed")
