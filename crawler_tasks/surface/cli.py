"""The ``crawler`` command. ``crawler crawl SEED...`` uses the configured broker when it answers
and a worker consumes the crawl queues; otherwise it starts what is missing (a private Redis,
local workers) for the duration of the command and says so. Every mistake of the user's is one
line on stderr and exit code 2 (see ``cli_common``); Ctrl-C during a crawl cancels it, prints
the summary and exits 130 (that command: ``crawl_command``; the others: ``commands``)."""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from importlib import resources
from typing import Any

import click

from .cli_common import json_option, run_main
from .commands import COMMANDS
from .crawl_command import crawl
from .dashboard import dashboard


class _Main(click.Group):
    def main(self, args: Any = None, prog_name: Any = None, **extra: Any) -> Any:  # type: ignore[override]
        standalone = extra.pop("standalone_mode", True)
        run = functools.partial(super().main, args, prog_name, standalone_mode=False, **extra)
        return run() if standalone is False else run_main(run)


@click.group(cls=_Main)
@click.version_option(package_name="crawler-tasks")
def main() -> None:
    """Distributed, polite web crawler on Celery and Redis."""


for _command in (*COMMANDS, crawl, dashboard):
    main.add_command(_command)


@main.command()
@click.option("--output", default="./data", type=click.Path(file_okay=False))
@json_option("Print the crawl's summary as JSON.")
def demo(output: str, as_json: bool) -> None:
    """Serve the bundled sample site on loopback and crawl it in embedded mode."""
    site = resources.files("crawler_tasks").joinpath("sample_site")
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    click.echo(f"sample site at {url}", err=True)
    try:
        code = crawl.main(  # type: ignore[attr-defined]
            [
                url,
                "--embedded",
                "--allow-private-networks",
                "--output",
                output,
                "--rate",
                "127.0.0.1=20",
                *(["--json"] if as_json else []),
            ],
            standalone_mode=False,
        )
    finally:
        server.shutdown()
    if code:
        raise click.exceptions.Exit(code)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
