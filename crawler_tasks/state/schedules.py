"""Periodic recrawls, run by celery beat with RedBeat's scheduler.

A schedule is a name, seeds, crawl options and a period (``every_hours``, ``every_seconds`` or a
``cron`` expression). Definitions live in Redis (``P:schedules``) and as RedBeat entries that
call ``crawl.start_scheduled(name)``; ``config/schedules.toml`` is loaded into Redis when beat
starts, and ``crawler schedule add|list|remove`` changes them at runtime.

Exactly one beat may run: RedBeat takes a lock in Redis (``redbeat_lock_timeout``, 60 s here);
a second beat waits on the lock and takes over only if the first one dies.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import InitVar, asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.schedules import crontab, schedule

from ..errors import ConfigError, ScheduleExists, shown
from ..limits import DAY, range_problem
from .keys import Keys
from .store import plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TASK = "crawl.start_scheduled"
#: Floor and ceiling of a period: one run a minute at most (cron's own step), one a year at
#: least. Below, beat starts crawls faster than they end (each with its own Bloom filter and
#: keys kept ``finished_ttl``): `--every-seconds 0.001` started 376 crawls in 25 s.
PERIOD_SECONDS = (60.0, 366.0 * DAY)


@dataclass(frozen=True)
class Schedule:
    name: str
    seeds: list[str]
    every_hours: float | None = None
    every_seconds: float | None = None
    cron: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: Check the seeds and options: False for a definition read back from Redis (checked when
    #: it was added; each run checks them again with the settings it starts with).
    check: InitVar[bool] = True

    def __post_init__(self, check: bool) -> None:
        periods = [p for p in (self.every_hours, self.every_seconds, self.cron) if p is not None]
        if len(periods) != 1:
            raise ConfigError(
                f"schedule {shown(self.name)}: give exactly one of every_hours, every_seconds or cron"
            )
        low, high = PERIOD_SECONDS
        for what, period, unit in (
            ("every_hours", self.every_hours, 3600),
            ("every_seconds", self.every_seconds, 1),
        ):
            # 0 is a period given, and wrong (not "no period")
            why = period is not None and range_problem(what, period, low / unit, high / unit)
            if why:
                raise ConfigError(f"schedule {shown(self.name)}: {why} (at most one run a minute)")
        if not self.seeds:
            raise ConfigError(f"schedule {shown(self.name)}: no seeds")
        # A cron that does not parse, or names no date that exists, is refused now, not at
        # beat time (where RedBeat's save raised celery's RuntimeError after the definition
        # was stored).
        self._check_fires(self.celery_schedule())
        if check:
            self._check_options()

    def _check_fires(self, when: schedule) -> None:
        """A cron naming a date that never comes (``0 0 31 2 *``, ``0 0 30 2 *``) is refused:
        celery finds no next run within its search and raises RuntimeError."""
        try:
            when.remaining_estimate(when.now())
        except RuntimeError:
            raise ConfigError(
                f"schedule {shown(self.name)}: cron {self.cron!r} never fires (no such date)"
            ) from None

    def _check_options(self) -> None:
        """The same rules as start_crawl, so a run never fails inside a worker on them."""
        if "schedule" in self.options:
            raise ConfigError(f"schedule {shown(self.name)}: 'schedule' is set by each run")
        try:
            plan(None, self.seeds, **self.options)
        except ConfigError as exc:
            raise ConfigError(f"schedule {shown(self.name)}: {exc}") from None

    def celery_schedule(self) -> schedule:
        if self.cron:
            fields = self.cron.split()
            if len(fields) != 5:
                raise ConfigError(
                    f"schedule {shown(self.name)}: cron needs 5 fields: {self.cron!r}"
                )
            minute, hour, day, month, weekday = fields
            try:
                return crontab(
                    minute=minute,
                    hour=hour,
                    day_of_month=day,
                    month_of_year=month,
                    day_of_week=weekday,
                )
            except ValueError as exc:
                raise ConfigError(
                    f"schedule {shown(self.name)}: cron {self.cron!r}: {exc}"
                ) from None
        seconds = self.every_seconds or (self.every_hours or 0) * 3600
        return schedule(run_every=timedelta(seconds=seconds))

    @classmethod
    def from_dict(cls, data: dict[str, Any], check: bool = True) -> Schedule:
        known = {"name", "seeds", "every_hours", "every_seconds", "cron", "options"}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"schedule {data.get('name')!r}: unknown keys {sorted(unknown)}")
        return cls(**data, check=check)


def load_file(path: str | Path) -> list[Schedule]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return [Schedule.from_dict(item) for item in data.get("schedule", [])]


class Schedules:
    """Schedule definitions in Redis, mirrored as RedBeat entries."""

    def __init__(self, app: Celery, client: redis.Redis, keys: Keys) -> None:
        self.app = app
        self.client = client
        self.keys = keys

    def add(self, item: Schedule, replace: bool = False) -> None:
        """Store ``item``; a schedule of that name already stored is refused (ConfigError,
        nothing written) unless ``replace`` (what loading config/schedules.toml does)."""
        from redbeat import RedBeatSchedulerEntry

        definition = json.dumps(asdict(item))
        if replace:
            self.client.hset(self.keys.schedules, item.name, definition)
        elif not self.client.hsetnx(self.keys.schedules, item.name, definition):
            raise ScheduleExists(item.name)
        entry = RedBeatSchedulerEntry(
            f"crawl:{item.name}", TASK, item.celery_schedule(), args=[item.name], app=self.app
        )
        entry.save()

    def remove(self, name: str) -> bool:
        from redbeat import RedBeatSchedulerEntry

        removed = bool(self.client.hdel(self.keys.schedules, name))
        prefix = self.app.conf.redbeat_key_prefix
        with contextlib.suppress(KeyError):
            RedBeatSchedulerEntry.from_key(f"{prefix}crawl:{name}", app=self.app).delete()
        return removed

    def get(self, name: str) -> Schedule | None:
        raw = self.client.hget(self.keys.schedules, name)
        return Schedule.from_dict(json.loads(raw), check=False) if raw else None

    def all(self) -> list[Schedule]:
        raw = self.client.hgetall(self.keys.schedules)
        return sorted(
            (Schedule.from_dict(json.loads(v), check=False) for v in raw.values()),
            key=lambda s: s.name,
        )

    def runs(self, name: str, limit: int = 20) -> list[str]:
        ids = self.client.zrevrange(self.keys.schedule_runs(name), 0, limit - 1)
        return [i.decode() for i in ids]

    def sync_file(self, path: str | Path) -> int:
        """Add (or update) every schedule of a TOML file; returns how many."""
        items = load_file(path)
        for item in items:
            self.add(item, replace=True)
        return len(items)
