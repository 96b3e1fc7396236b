"""The ``crawler`` commands that look at or steer crawls already started: status, list, watch,
pause/resume/cancel, forget, failed, retry-failed, set-rate, set-ceiling and metrics (schedule:
``schedule_command``; export: ``export``). Each that prints a result takes ``--json``."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Mapping
from typing import Any

import click

from ..errors import ConfigError, shown
from ..limits import INFINITE_OK, number, range_problem
from ..redaction import redact
from ..settings import LIMITS
from ..state.formats import Counter
from . import cli_common as cli
from .cli_common import Fail, broker_option, connect, handle, json_option, say
from .export import export
from .schedule_command import schedule


@click.command()
@click.argument("crawl_id")
@broker_option
@json_option("Print the figures as one JSON object.")
def status(crawl_id: str, broker: str | None, as_json: bool) -> None:
    """Counters, rate and busiest domains of one crawl."""
    from .figures import crawl_figures

    crawl = handle(crawl_id, broker)
    p = cli.patiently(crawl.settings, lambda: crawl_figures(crawl))
    if as_json:
        click.echo(cli.dumps(p.to_json(), indent=2))
        return
    from .display import line

    click.echo(line(p))
    detail = p.detail
    assert detail is not None  # crawl_figures reads it
    if detail.on_item_waiting:
        click.echo(
            f"  on_item: {detail.on_item_waiting} batches waiting in queue "
            f"{crawl.options.on_item_queue!r} (is a worker consuming it?)"
        )
    for d in detail.domains:
        click.echo(f"  {d['domain']}: {domain_line(d)}")
    b = detail.bloom
    click.echo(f"  bloom: fill={b['fill_ratio']:.4f} est. false positives={fp_rate(b)}")


def domain_line(d: Mapping[str, Any]) -> str:
    """One host's state for ``crawler status``: pace, and why it waits when it does."""
    text = (
        f"pending={d['pending']} in_flight={d['in_flight']} rate={d['rate']:.3g}/s "
        f"slowdown={d['slowdown']:.2f}"
    )
    if d.get("cluster_rate"):
        text += f" set-rate={d['cluster_rate']}/s (all crawls)"
    if d.get("ceiling"):
        text += f" ceiling={d['ceiling']:g}/s (shared by all crawls)"
    if d.get("why"):
        text += f" interval={d['interval'] or 0:.3g}s why: {'; '.join(d['why'])}"
    if d.get("dead"):
        text += " DEAD: down longer than max_host_outage, its URLs failed"
    elif d.get("down_since"):
        since = time.strftime("%H:%M:%S", time.localtime(d["down_since"]))
        down_for = time.time() - d["down_since"]
        text += f" DOWN since {since} ({down_for:.0f}s), next probe in {d['next_probe_s']:.0f}s"
    return text


def fp_rate(bloom: Mapping[str, float]) -> str:
    rate = bloom["estimated_fp_rate"]
    return "< 1e-9" if rate < 1e-9 else f"{rate:.2g}"


@click.command("list")
@broker_option
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option("One JSON array (unreadable ones too).")
def list_cmd(broker: str | None, limit: int, as_json: bool) -> None:
    """Crawls known to the broker, newest first."""
    from ..state.keys import Keys
    from .crawl import listed

    settings, client = connect(broker)
    crawls = cli.patiently(settings, lambda: listed(client, Keys(settings.key_prefix), limit))
    if as_json:
        click.echo(cli.dumps([c.to_json() for c in crawls]))
        return
    if not crawls:
        click.echo(f"no crawls at {redact(settings.state_url)}", err=True)
        return
    click.echo("CRAWL ID\tSTATUS\tAGE\tDONE\tQUEUED\tFAILED\tPAGES/S\tSEEDS")
    for c in crawls:
        p = c.progress
        if p is None:
            click.echo(f"skipped: {c.unreadable}", err=True)
            continue
        seeds = c.seeds[0] + (f" (+{len(c.seeds) - 1})" if len(c.seeds) > 1 else "")
        pace = f"{p.pages_per_s:.1f}" if p.paced else "-"
        click.echo(
            f"{c.crawl_id}\t{p.status}\t{age(c.age_s)}\t{p[Counter.DONE]}"
            f"\t{p[Counter.QUEUED]}\t{p[Counter.FAILED]}\t{pace}\t{seeds}"
        )


def age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


@click.command()
@click.argument("crawl_id")
@broker_option
@json_option("One JSON object a line: the progress every second, the final one last.")
def watch(crawl_id: str, broker: str | None, as_json: bool) -> None:
    """Live progress of a crawl until it finishes."""
    from .display import watch as show
    from .display import watch_json

    crawl = cli.patient(handle(crawl_id, broker))
    watch_json(crawl) if as_json else show(crawl)


_DONE = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}
#: Who the crawl's action log says acted, for the commands here (the dashboard: its user).
CLI = "cli"


def _control(action: str, doc: str) -> click.Command:
    @click.command(name=action, help=doc)
    @click.argument("crawl_id")
    @broker_option
    @json_option()
    def command(crawl_id: str, broker: str | None, as_json: bool) -> None:
        from ..state.workers import alive

        crawl = handle(crawl_id, broker)
        if not cli.patiently(crawl.settings, getattr(crawl, action)):
            raise Fail(f"crawl {crawl_id} is {crawl.status}: nothing to {action}")
        # In the crawl's action log, as the dashboard's controls are (its Actions card).
        crawl.store.record_action(action, by=CLI)
        # The workers carry the steering out: with none alive, nothing happens yet.
        served = alive(crawl.client, crawl.keys, crawl.settings.worker_dead_seconds)
        result = {"crawl_id": crawl_id, "action": action, "no_worker": not served}
        say(as_json, result, f"{crawl_id}: {action}")
        if not served:
            click.echo(
                f"no worker serves this crawl: it will be {_DONE[action]} when one starts "
                f"(`crawler forget {crawl_id}` removes it now)",
                err=True,
            )

    return command


@click.command()
@click.argument("crawl_id")
@click.option("--force", is_flag=True, help="Also a crawl still running (its workers stop).")
@broker_option
@json_option()
def forget(crawl_id: str, force: bool, broker: str | None, as_json: bool) -> None:
    """Delete a finished, cancelled, stranded or unreadable crawl's keys from Redis (its
    files stay); a running one only with --force."""
    from ..state.registry import forget as forget_keys
    from ..state.store import RedisHandle

    settings, client = connect(broker)
    r = RedisHandle.connect(client, settings.key_prefix)
    ck = r.keys.crawl(crawl_id)
    known = client.exists(ck.state, ck.config) or client.zscore(r.keys.crawls, crawl_id)
    if not known:
        raise Fail(f"no crawl {shown(crawl_id)} at {redact(settings.state_url)}")
    try:
        gone = forget_keys(r, crawl_id, force, settings.worker_dead_seconds)
    except ConfigError as exc:
        raise Fail(str(exc)) from None
    result = {"crawl_id": crawl_id, "forgotten": True, "keys_deleted": gone}
    say(as_json, result, f"{crawl_id}: forgotten ({gone} keys deleted; its output files stay)")


@click.command()
@click.argument("crawl_id")
@broker_option
@json_option("One JSON array instead of JSON lines.")
def failed(crawl_id: str, broker: str | None, as_json: bool) -> None:
    """Dead-lettered URLs of a crawl (JSON lines; --json: one array)."""
    records = cli.patient(handle(crawl_id, broker)).failed()
    if as_json:
        click.echo(cli.dumps(records))
        return
    for record in records:
        click.echo(json.dumps(record))


@click.command("retry-failed")
@click.argument("crawl_id")
@broker_option
@json_option()
def retry_failed(crawl_id: str, broker: str | None, as_json: bool) -> None:
    """Put a crawl's failed URLs back into its frontier."""
    crawl = handle(crawl_id, broker)
    n = crawl.retry_failed()
    crawl.store.record_action("retry_failed", by=CLI, requeued=n)
    say(as_json, {"crawl_id": crawl_id, "requeued": n}, f"{crawl_id}: {n} URLs requeued")


def parse_rate(text: str) -> float | None:
    """'default' -> None, 'inf' -> no limit, else requests/s within the rate's range (the
    ``default_rate`` setting's): ``1e400`` is not "inf", ``-5`` and ``nan`` are refused."""
    if text == "default":
        return None
    try:
        rate = number(text)
    except ValueError as exc:
        said = str(exc) if "too large" in str(exc) else "expected requests/s, inf or default"
        raise Fail(f"rate {text!r}: {said}") from None
    low, high = LIMITS["default_rate"]
    why = range_problem("rate", rate, low, high, "default_rate" in INFINITE_OK)
    if why:
        raise Fail(f"rate {text!r}: {why} (default: remove)")
    return rate


#: A negative rate is an argument, not an option: "-5" gets its own error, not click's
#: "No such option '-5'".
_NUMBERS_OK = {"ignore_unknown_options": True}


@click.command("set-rate", context_settings=_NUMBERS_OK)
@click.argument("domain")
@click.argument("rate")
@broker_option
@json_option('One JSON object: host, rate (null: removed; "inf": no limit), scope.')
def set_rate_cmd(domain: str, rate: str, broker: str | None, as_json: bool) -> None:
    """Cluster-wide requests/s for DOMAIN (all crawls); 'default' removes it."""
    from ..state.politeness import set_rate

    host, value = parse_host(domain), parse_rate(rate)
    set_rate(*_keys_of(broker), host, value)
    if value is None:
        text = f"{host}: set-rate removed; each crawl's own rate applies again"
    else:
        text = (
            f"{host}: {rate} requests/s, cluster-wide: every crawl of this host, running or "
            f"started later, until `crawler set-rate {host} default` (a crawl's own "
            "rates={host: r} still wins)"
        )
    say(as_json, {"host": host, "rate": value, "scope": "cluster"}, text)


@click.command("set-ceiling", context_settings=_NUMBERS_OK)
@click.argument("domain")
@click.argument("rate")
@broker_option
@json_option("One JSON object: host, ceiling (null: removed).")
def set_ceiling_cmd(domain: str, rate: str, broker: str | None, as_json: bool) -> None:
    """Requests/s that ALL crawls of DOMAIN share at most (each crawl's own pace still holds);
    'default' removes it."""
    from ..state.ceilings import set_ceiling

    host, value = parse_host(domain, "set-ceiling"), parse_rate(rate)
    if value is not None and math.isinf(value):
        raise Fail(f"set-ceiling {rate!r}: a ceiling is a number of requests/s (or default)")
    set_ceiling(*_keys_of(broker), host, value)
    if value is None:
        text = f"{host}: ceiling removed"
    else:
        text = (
            f"{host}: at most {rate} requests/s for all crawls together (each crawl also keeps "
            "its own pace), until `crawler set-ceiling " + host + " default`"
        )
    say(as_json, {"host": host, "ceiling": value}, text)


def _keys_of(broker: str | None) -> tuple[Any, Any]:
    """(client, key names) of the broker's Redis, for the cluster-wide host settings."""
    from ..state.keys import Keys

    settings, client = connect(broker)
    return client, Keys(settings.key_prefix)


def parse_host(text: str, command: str = "set-rate") -> str:
    """A politeness domain as buckets are keyed: a host name or IP address, no URL, no port
    (checked as the dashboard checks it: web/host_rates.py)."""
    from ..errors import ConfigError
    from ..web.host_rates import host_name

    try:
        return host_name(text, command)
    except ConfigError as exc:
        raise Fail(str(exc)) from None


@click.command()
@broker_option
@click.option("--port", type=click.IntRange(0, 65535), help="Port of /metrics (default: setting).")
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
def metrics(broker: str | None, port: int | None, address: str) -> None:
    """Serve crawl-level Prometheus metrics until interrupted."""
    from prometheus_client import REGISTRY, start_http_server

    from .metrics import CrawlCollector

    settings, client = connect(broker)
    port = settings.metrics_port if port is None else port
    # Registered first: a scrape that came between the server's start and the registration
    # got only the process metrics, no crawl's (seen on a loaded machine).
    REGISTRY.register(CrawlCollector(client, settings))
    try:
        start_http_server(port, addr=address)
    except OSError as exc:
        raise Fail(f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}") from None
    click.echo(f"metrics on http://{address}:{port}/metrics", err=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


COMMANDS = [
    status,
    list_cmd,
    watch,
    _control("pause", "Stop releasing a crawl's URLs (in-flight ones finish)."),
    _control("resume", "Release a paused crawl's URLs again."),
    _control("cancel", "Drop a crawl's pending URLs; it finishes as cancelled."),
    failed,
    forget,
    retry_failed,
    set_rate_cmd,
    set_ceiling_cmd,
    metrics,
    schedule,
    export,
]
