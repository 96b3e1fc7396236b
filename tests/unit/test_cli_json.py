"""``--json`` is honoured everywhere (issue 34): every ``crawler`` command that prints a result
takes it (read from the command's own parser). What each prints: tests/integration/test_cli_json.py."""

from __future__ import annotations

import click

from crawler_tasks.surface.cli import main
from crawler_tasks.surface.commands import COMMANDS

#: Commands that serve until interrupted and print no result: no --json.
SERVERS = {"metrics", "dashboard"}


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command a user can run, by its full name ("schedule add"); groups opened."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(_commands(command, f"{prefix}{name} "))
        else:
            found[prefix + name] = command
    return found


def test_every_command_that_prints_a_result_takes_json() -> None:
    """A new command without --json fails here unless it is a server (SERVERS)."""
    assert {c.name for c in COMMANDS} <= set(main.commands), "COMMANDS are all registered"
    commands = _commands(main)
    assert {"pause", "schedule list", "export", "crawl", "watch"} <= set(commands)
    missing = [
        name
        for name, command in commands.items()
        if name not in SERVERS
        and not any(p.name == "as_json" and "--json" in p.opts for p in command.params)
    ]
    assert missing == []
    assert set(commands) >= SERVERS, "an excluded command that no longer exists: drop it"
