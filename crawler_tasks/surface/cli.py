"""The ``crawler`` command. ``crawler crawl SEED...`` uses the configured broker when it answers
and a worker consumes the crawl queues; otherwise it starts what is missing (a private Redis,
local workers) for the duration of the command and says so."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import math
import sys
import tempfile
import threading
from collections.abc import Iterator
from importlib import resources
from typing import Any

import click
import redis

from ..errors import InvalidSeed
from ..settings import Settings, load, redact


def _settings(broker: str | None) -> Settings:
    return load(broker_url=broker) if broker else load()


def _client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(settings.state_url, socket_connect_timeout=2)


def _reachable(settings: Settings) -> bool:
    try:
        _client(settings).ping()
        return True
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def _has_crawl_workers(settings: Settings) -> bool:
    from ..worker.app import make_app

    replies = make_app(settings).control.inspect(timeout=1.0).active_queues() or {}
    names = {q["name"] for queues in replies.values() for q in queues}
    return "crawl.high" in names and "parse" in names


def _parse_rates(values: tuple[str, ...]) -> dict[str, float]:
    rates = {}
    for item in values:
        host, sep, rate = item.partition("=")
        try:
            rates[host.strip().lower()] = math.inf if rate.strip() == "inf" else float(rate)
        except ValueError:
            sep = ""
        if not sep or not host:
            raise click.BadParameter(f"{item!r}: expected HOST=RATE (requests/s or inf)")
    return rates


@contextlib.contextmanager
def cluster(settings: Settings, embedded: bool, log_dir: str | None) -> Iterator[Settings]:
    """Yield settings pointing at a broker with crawl workers, starting what is missing."""
    from .embedded import local_workers, private_redis

    with contextlib.ExitStack() as stack:
        if not embedded and not _reachable(settings):
            click.echo(
                f"broker {redact(settings.broker_url)} unreachable: running embedded", err=True
            )
            embedded = True
        if embedded:
            url = stack.enter_context(private_redis())
            settings = load(broker_url=url, redis_url="")
            click.echo(f"embedded: private redis-server at {url}, local workers", err=True)
            stack.enter_context(local_workers(url, log_dir=log_dir))
        elif not _has_crawl_workers(settings):
            click.echo("no worker consumes the crawl queues: starting local workers", err=True)
            stack.enter_context(local_workers(settings.broker_url, log_dir=log_dir))
        yield settings


@click.group()
@click.version_option(package_name="crawler-tasks")
def main() -> None:
    """Distributed, polite web crawler on Celery and Redis."""


@main.command()
@click.argument("seeds", nargs=-1, required=True)
@click.option("--broker", help="Broker/state Redis URL (default: $CRAWLER_BROKER_URL).")
@click.option("--output", type=click.Path(file_okay=False), help="Output directory.")
@click.option("--max-depth", type=int, help="Links followed from a seed.")
@click.option("--max-pages", type=int, default=0, help="URLs admitted at most (0: no limit).")
@click.option("--priority", type=click.Choice(["high", "medium", "low"]), default="high")
@click.option("--order", type=click.Choice(["bfs", "dfs"]), default="bfs")
@click.option("--max-pages-per-host", type=int, help="URLs admitted per domain at most.")
@click.option("--allowed-domain", "allowed_domains", multiple=True, help="Repeatable.")
@click.option("--include", multiple=True, help="Regex a URL must match (repeatable).")
@click.option("--exclude", multiple=True, help="Regex a URL must not match (repeatable).")
@click.option("--rate", "rates", multiple=True, help="HOST=RATE req/s; inf = no limit.")
@click.option("--default-rate", type=float, help="Requests/s per domain for this crawl.")
@click.option("--concurrency", type=int, help="Requests in flight per domain.")
@click.option("--allow-private-networks", is_flag=True, help="Allow loopback/private hosts.")
@click.option("--sitemaps", is_flag=True, help="Enqueue robots.txt Sitemap: URLs as seeds.")
@click.option("--embedded", is_flag=True, help="Private Redis + local workers for this run.")
@click.option("--no-wait", is_flag=True, help="Return once the crawl is started.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def crawl(
    seeds: tuple[str, ...],
    broker: str | None,
    embedded: bool,
    no_wait: bool,
    as_json: bool,
    rates: tuple[str, ...],
    default_rate: float | None,
    concurrency: int | None,
    **options: Any,
) -> None:
    """Crawl from SEED URLs; waits and shows progress unless --no-wait."""
    from .crawl import check_seeds

    try:
        check_seeds(seeds, options["allow_private_networks"])
    except InvalidSeed as exc:
        raise click.UsageError(str(exc)) from None
    if default_rate is not None:
        options["rate"] = default_rate
    if concurrency is not None:
        options["concurrency"] = concurrency
    settings = _settings(broker)
    if no_wait and (embedded or not _reachable(settings)):
        raise click.UsageError(
            "--no-wait needs a running broker (embedded runs end with the command)"
        )
    with (
        tempfile.TemporaryDirectory(prefix="crawler-logs-") as logs,
        cluster(settings, embedded, logs) as live,
    ):
        summary = _run(live, seeds, _parse_rates(rates), no_wait, options)
    if summary is not None:
        click.echo(json.dumps(summary, indent=2) if as_json else _summary_text(summary))


def _run(
    settings: Settings,
    seeds: tuple[str, ...],
    rates: dict[str, float],
    no_wait: bool,
    options: dict[str, Any],
) -> dict[str, Any] | None:
    from rich.console import Console

    from .crawl import start_crawl
    from .display import watch

    opts = {k: v for k, v in options.items() if v not in (None, ())}
    handle = start_crawl(list(seeds), settings=settings, rates=rates, **opts)
    click.echo(f"crawl {handle.id} started; output in {handle.output_dir}", err=True)
    if no_wait:
        click.echo(handle.id)
        return None
    try:
        # Progress on stderr: stdout carries only the summary (``--json`` pipes cleanly).
        watch(handle, console=Console(stderr=True))
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: cancelling crawl {handle.id}", err=True)
        handle.cancel()
        handle.wait(timeout=30)
    return handle.summary()


def _summary_text(s: dict[str, Any]) -> str:
    c = s.get("counters", {})
    lines = [
        f"crawl {s['crawl_id']} {s['status']} in {s['duration_s']:.1f}s "
        f"({s['pages_per_s']:.1f} pages/s)",
        f"  pages: {c.get('done', 0)} done, {c.get('fetched', 0)} fetched, "
        f"{c.get('parsed', 0)} parsed, {c.get('failed', 0)} failed, "
        f"{c.get('robots_disallowed', 0)} disallowed by robots.txt",
        f"  status codes: {s.get('status_codes', {})}",
    ]
    if s.get("failures"):
        lines.append(f"  failures: {s['failures']}")
    return "\n".join(lines)


def _handle(crawl_id: str, broker: str | None) -> Any:
    from .crawl import Crawl

    settings = _settings(broker)
    return Crawl(crawl_id, settings=settings, client=_client(settings))


broker_option = click.option("--broker", help="Broker/state Redis URL.")


@main.command()
@click.argument("crawl_id")
@broker_option
@click.option("--json", "as_json", is_flag=True)
def status(crawl_id: str, broker: str | None, as_json: bool) -> None:
    """Counters, rate and busiest domains of one crawl."""
    handle = _handle(crawl_id, broker)
    p = handle.progress()
    p["domains"] = handle.domains(10)
    p["bloom"] = handle.bloom()
    if as_json:
        click.echo(json.dumps(p, indent=2, default=str))
        return
    from .display import line

    click.echo(line(p))
    for d in p["domains"]:
        click.echo(
            f"  {d['domain']}: pending={d['pending']} in_flight={d['in_flight']} "
            f"rate={d['rate']:.3g}/s slowdown={d['slowdown']:.2f}"
        )
    b = p["bloom"]
    click.echo(
        f"  bloom: fill={b['fill_ratio']:.4f} est. false positives={b['estimated_fp_rate']:.2e}"
    )


@main.command("list")
@broker_option
def list_cmd(broker: str | None) -> None:
    """Crawls known to the broker, newest first."""
    from ..state.keys import Keys
    from .crawl import list_crawls

    settings = _settings(broker)
    for c in list_crawls(_client(settings), Keys(settings.key_prefix)):
        click.echo(f"{c['crawl_id']}\t{c.get('status', '?')}")


@main.command()
@click.argument("crawl_id")
@broker_option
def watch(crawl_id: str, broker: str | None) -> None:
    """Live progress of a crawl until it finishes."""
    from .display import watch as show

    show(_handle(crawl_id, broker))


def _control(action: str) -> None:
    @main.command(name=action, help=f"{action.capitalize()} a crawl.")
    @click.argument("crawl_id")
    @broker_option
    def command(crawl_id: str, broker: str | None) -> None:
        getattr(_handle(crawl_id, broker), action)()
        click.echo(f"{crawl_id}: {action}")


for _action in ("pause", "resume", "cancel"):
    _control(_action)


@main.command()
@click.argument("crawl_id")
@broker_option
def failed(crawl_id: str, broker: str | None) -> None:
    """Dead-lettered URLs of a crawl (JSON lines)."""
    for record in _handle(crawl_id, broker).failed():
        click.echo(json.dumps(record))


@main.command("retry-failed")
@click.argument("crawl_id")
@broker_option
def retry_failed(crawl_id: str, broker: str | None) -> None:
    """Put a crawl's failed URLs back into its frontier."""
    n = _handle(crawl_id, broker).retry_failed()
    click.echo(f"{crawl_id}: {n} URLs requeued")


@main.command("set-rate")
@click.argument("domain")
@click.argument("rate")
@broker_option
def set_rate_cmd(domain: str, rate: str, broker: str | None) -> None:
    """Cluster-wide requests/s for DOMAIN (all crawls); 'default' removes it."""
    from ..state.keys import Keys
    from ..state.politeness import set_rate

    settings = _settings(broker)
    value = None if rate == "default" else float(rate)
    set_rate(_client(settings), Keys(settings.key_prefix), domain.lower(), value)
    click.echo(f"{domain}: {rate} requests/s")


@main.command()
@broker_option
@click.option("--port", type=int, help="Port to serve /metrics on (default: setting).")
def metrics(broker: str | None, port: int | None) -> None:
    """Serve crawl-level Prometheus metrics until interrupted."""
    import time

    from prometheus_client import REGISTRY, start_http_server

    from .metrics import CrawlCollector

    settings = _settings(broker)
    REGISTRY.register(CrawlCollector(_client(settings), settings))
    start_http_server(port or settings.metrics_port)
    click.echo(f"metrics on :{port or settings.metrics_port}/metrics", err=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


@main.group()
def schedule() -> None:
    """Periodic recrawls run by celery beat."""


def _schedules(broker: str | None) -> Any:
    from ..state.keys import Keys
    from ..state.schedules import Schedules
    from ..worker.app import make_app

    settings = _settings(broker)
    return Schedules(make_app(settings), _client(settings), Keys(settings.key_prefix))


@schedule.command("add")
@click.argument("name")
@click.argument("seeds", nargs=-1, required=True)
@click.option("--every-hours", type=float)
@click.option("--every-seconds", type=float)
@click.option("--cron", help="'minute hour day month weekday'")
@click.option("--option", "options", multiple=True, help="KEY=JSON crawl option (repeatable).")
@broker_option
def schedule_add(
    name: str,
    seeds: tuple[str, ...],
    every_hours: float | None,
    every_seconds: float | None,
    cron: str | None,
    options: tuple[str, ...],
    broker: str | None,
) -> None:
    """Add or replace schedule NAME crawling SEEDS."""
    from ..errors import ConfigError
    from ..state.schedules import Schedule
    from .crawl import check_seeds

    opts = {}
    for item in options:
        key, _, value = item.partition("=")
        try:
            opts[key] = json.loads(value)
        except json.JSONDecodeError:
            opts[key] = value
    try:
        check_seeds(seeds, bool(opts.get("allow_private_networks")))
        item_ = Schedule(name, list(seeds), every_hours, every_seconds, cron, opts)
    except (InvalidSeed, ConfigError) as exc:
        raise click.UsageError(str(exc)) from None
    _schedules(broker).add(item_)
    click.echo(f"schedule {name} added")


@schedule.command("list")
@broker_option
def schedule_list(broker: str | None) -> None:
    """Schedules and their most recent runs."""
    schedules = _schedules(broker)
    for item in schedules.all():
        period = item.cron or (
            f"every {item.every_hours}h" if item.every_hours else f"every {item.every_seconds}s"
        )
        runs = schedules.runs(item.name, 5)
        click.echo(f"{item.name}\t{period}\t{' '.join(item.seeds)}\truns: {', '.join(runs) or '-'}")


@schedule.command("remove")
@click.argument("name")
@broker_option
def schedule_remove(name: str, broker: str | None) -> None:
    """Remove schedule NAME (its past runs stay listed under their crawl ids)."""
    if not _schedules(broker).remove(name):
        raise click.UsageError(f"no schedule {name!r}")
    click.echo(f"schedule {name} removed")


@main.command()
@click.option("--output", default="./data", type=click.Path(file_okay=False))
def demo(output: str) -> None:
    """Serve the bundled sample site on loopback and crawl it in embedded mode."""
    site = resources.files("crawler_tasks").joinpath("sample_site")
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    click.echo(f"sample site at {url}", err=True)
    try:
        crawl.main(  # type: ignore[attr-defined]
            [
                url,
                "--embedded",
                "--allow-private-networks",
                "--output",
                output,
                "--rate",
                "127.0.0.1=20",
            ],
            standalone_mode=False,
        )
    finally:
        server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
