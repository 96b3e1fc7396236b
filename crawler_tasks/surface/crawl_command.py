"""``crawler crawl SEED...``: options checked whole before anything is written, then the crawl
run on a usable broker (started here when missing: :func:`cluster`); registered by ``cli``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ..errors import ConfigError, CrawlerError
from ..limits import number
from ..redaction import redact
from ..settings import Settings, load
from ..state import connection
from ..state.options import PRIORITIES, CrawlOptions
from ..web.urls import host_of, normalize
from . import cli_common as cli
from .cli_common import INTERRUPTED, Fail, json_option, option_items, parse_options, settings_for
from .crawl_run import run
from .summary import summary_text

if TYPE_CHECKING:
    from .seeds import SeedsFile


def _inspect(settings: Settings) -> Any:
    """Celery's broadcast inspection of the broker's workers (answers within 1 s)."""
    from ..worker.process.app import make_app

    return make_app(settings).control.inspect(timeout=1.0)


def _queues_by_worker(inspect: Any) -> dict[str, set[str]]:
    return {w: {q["name"] for q in qs} for w, qs in (inspect.active_queues() or {}).items()}


def _has_crawl_workers(settings: Settings, renders: int = 0) -> bool:
    names = set().union(*_queues_by_worker(_inspect(settings)).values())
    return "crawl.high" in names and "parse" in names and (not renders or "crawl.render" in names)


def _check_on_item(settings: Settings, opts: CrawlOptions) -> None:
    """An --on-item task no worker of its queue knows would lose every batch (Celery drops a
    message of an unknown task): refused. No worker on the queue at all: the batches wait
    there, which the user is told now (and ``crawler status`` shows the queue's length)."""
    if not opts.on_item:
        return
    # Asked again after cluster(): the local workers it may have started answer now.
    inspect = _inspect(settings)
    serving = [w for w, qs in _queues_by_worker(inspect).items() if opts.on_item_queue in qs]
    if not serving:
        click.echo(
            f"warning: no worker consumes queue {opts.on_item_queue!r}: the --on-item batches "
            f"wait there until one does (celery -A crawler_tasks worker -Q {opts.on_item_queue} "
            "--include YOUR.MODULE)",
            err=True,
        )
        return
    registered = inspect.registered() or {}
    if not any(opts.on_item in registered.get(w, ()) for w in serving):
        raise Fail(
            f"--on-item {opts.on_item}: no worker of queue {opts.on_item_queue!r} knows this "
            "task (start it with --include of its module); its items would be dropped"
        )


def _parse_rates(values: tuple[str, ...]) -> dict[str, float]:
    rates = {}
    for item in values:
        host, sep, rate = item.partition("=")
        if not sep or not host:
            raise Fail(f"--host-rate {item!r}: expected HOST=RATE (requests/s or inf)")
        try:
            rates[host.strip().lower()] = number(rate)  # "1e400" is not "inf"
        except ValueError as exc:
            why = str(exc) if "too large" in str(exc) else "requests/s or inf"
            raise Fail(f"--host-rate {item!r}: expected HOST=RATE ({why})") from None
    return rates


def _request_settings(options: dict[str, Any]) -> dict[str, Any]:
    """--header, --cookie and --auth as the crawl options headers, cookies and auth."""
    headers: dict[str, str] = {}
    cookies: dict[str, dict[str, str]] = {}
    auth: dict[str, str] = {}
    for item in options.pop("headers", ()):
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise Fail(f"--header {item!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    for item in options.pop("cookies", ()):
        host, sep, pair = item.partition(":")
        name, eq, value = pair.partition("=")
        if not (sep and eq and host and name):
            raise Fail(f"--cookie {item!r}: expected HOST:NAME=VALUE")
        cookies.setdefault(host.lower(), {})[name] = value
    for item in options.pop("auth", ()):
        host, sep, ref = item.partition("=")
        if not (sep and host):
            raise Fail(f"--auth {item!r}: expected HOST=env:NAME")
        auth[host.lower()] = ref
    return {"headers": headers or None, "cookies": cookies or None, "auth": auth or None}


@contextlib.contextmanager
def cluster(
    settings: Settings, embedded: bool, logs: str | None, explicit: bool = True, renders: int = 0
) -> Iterator[Settings]:
    """Yield settings pointing at a broker with crawl workers, starting what is missing. A
    broker the user named (``explicit``: --broker, CRAWLER_BROKER_URL, CRAWLER_REDIS_URL) that
    cannot be used is one line and exit 2; only the built-in default falls back to a private
    Redis, and says so."""
    from .embedded import local_workers, private_redis
    from .probe import problem

    with contextlib.ExitStack() as stack:
        why = None if embedded else problem(settings)
        if why is not None and explicit:
            raise Fail(why)
        if why is not None:
            click.echo(f"{why}: running embedded (no broker configured)", err=True)
            embedded = True
        if not embedded:
            try:
                connection.check_broker(settings.broker_url)
            except ConfigError as exc:
                raise Fail(str(exc)) from None
        if embedded:
            _check_browser(settings, renders)  # before the private Redis: nothing is written
            try:
                url = stack.enter_context(private_redis())
            except RuntimeError as exc:
                raise Fail(str(exc)) from None
            settings = load(broker_url=url, redis_url="")
            click.echo(f"embedded: private redis-server at {url}, local workers", err=True)
            stack.enter_context(
                local_workers(url, settings.state_url, log_dir=logs, renderers=renders)
            )
        elif not _has_crawl_workers(settings, renders):  # a render worker too, when it renders
            _check_browser(settings, renders)
            click.echo("no worker consumes the crawl queues: starting local workers", err=True)
            stack.enter_context(
                local_workers(
                    settings.broker_url, settings.state_url, log_dir=logs, renderers=renders
                )
            )
        yield settings


def _check_browser(settings: Settings, renders: int) -> None:
    """The render workers this command is about to start run its Chromium (the same
    ``CRAWLER_CHROMIUM_PATH``): one that cannot run is one line naming the path it tried, exit
    2, before anything is started or written. Left to the workers, they refused to start and
    the crawl waited on a render tier that could not render (issue 50: ``in_flight=1`` for 4
    minutes). A remote render worker checks its own at start (worker/tasks.py) and, refusing,
    never consumes ``crawl.render``: then this command starts local ones, checked here."""
    if not renders:
        return
    from ..worker.render.browser import browser_problem

    why = browser_problem(settings)
    if why is not None:
        raise Fail(f"--render: {why}")


def _default(name: str) -> str:
    """A crawl option's default, for a flag's help: the flags declare none of their own."""
    return f"default: {CrawlOptions.__dataclass_fields__[name].default}"


@click.command()
@click.argument("seeds", nargs=-1)
@click.option(
    "--seeds-file",
    help="More seeds, one URL a line ('-': standard input); checked whole, admitted in batches.",
)
@click.option("--broker", help="Broker/state Redis URL (default: $CRAWLER_BROKER_URL).")
@click.option(
    "--output",
    type=click.Path(file_okay=False),
    help="Directory every worker writes to (default: each worker's CRAWLER_OUTPUT_DIR).",
)
@click.option("--max-depth", type=int, help="Links followed from a seed.")
@click.option(
    "--max-pages", type=int, help=f"URLs admitted at most, 0: no limit ({_default('max_pages')})."
)
@click.option("--priority", type=click.Choice(PRIORITIES), help=f"({_default('priority')})")
@click.option("--order", type=click.Choice(["bfs", "dfs"]), help=f"({_default('order')})")
@click.option("--max-pages-per-host", type=int, help="URLs admitted per domain at most.")
@click.option("--render", type=click.Choice(["never", "always", "auto"]), help="Run JavaScript.")
@click.option("--allowed-domain", "allowed_domains", multiple=True, help="Repeatable.")
@click.option("--include", multiple=True, help="Regex a URL must match (repeatable).")
@click.option("--exclude", multiple=True, help="Regex a URL must not match (repeatable).")
@click.option(
    "--host-rate",
    "--rate",  # the old spelling, kept: it set `rates` while --default-rate sets `rate`
    "rates",
    multiple=True,
    help="HOST=RATE req/s for one host (the `rates` option); inf = no limit. Also --rate.",
)
@click.option("--default-rate", help="Requests/s per domain ($CRAWLER_DEFAULT_RATE).")
@click.option("--concurrency", type=int, help="In flight per domain ($CRAWLER_DEFAULT_CONCURRENCY)")
@click.option("--ip-rate", type=float, help="Requests/s per server address ($CRAWLER_IP_RATE).")
@click.option("--ip-concurrency", type=int, help="In flight per server address (0 = no limit).")
@click.option("--ip-exempt", multiple=True, help="CIDR or host suffix not grouped by address.")
@click.option("--autothrottle", is_flag=True, help="Pace each host from its latency.")
@click.option("--allow-private-networks", is_flag=True, help="Allow loopback/private hosts.")
@click.option("--sitemaps", is_flag=True, help="Enqueue robots.txt Sitemap: URLs as seeds.")
@click.option("--header", "headers", multiple=True, help="'Name: value' on every request.")
@click.option("--cookie", "cookies", multiple=True, help="HOST:NAME=VALUE (repeatable).")
@click.option("--auth", multiple=True, help="HOST=env:NAME, NAME holding user:password.")
@click.option("--proxy", help="http://host:port, or env:NAME when it has credentials.")
@click.option("--user-agent", help="User-Agent header of every request ($CRAWLER_USER_AGENT).")
@click.option("--extract", help="Extraction hook run on every page: package.module:function.")
@click.option(
    "--extract-timeout",
    type=float,
    help=f"Seconds a hook may take per page ({_default('extract_timeout')}).",
)
@click.option("--on-item", help="Celery task (by name) that receives each page's items.")
@click.option("--on-item-queue", help=f"The --on-item task's queue ({_default('on_item_queue')}).")
@option_items
@click.option("--embedded", is_flag=True, help="Private Redis + local workers for this run.")
@click.option("--no-wait", is_flag=True, help="Return once the crawl is started.")
@json_option("Print the summary (--no-wait: the crawl started) as JSON.")
def crawl(broker: str | None, embedded: bool, no_wait: bool, as_json: bool, **_: Any) -> int:
    """Crawl from SEED URLs; waits and shows progress unless --no-wait. Any crawl option
    (docs/guides/crawl-options.md) can be given as --option KEY=JSON."""
    settings = settings_for(broker)
    ctx = click.get_current_context()
    with contextlib.ExitStack() as stack:
        seeds_file = _seeds_file(ctx, stack)
        opts = crawl_options(ctx, settings, seeds_file)
        _check_output(opts.output, settings.output_dir if embedded else "")
        renders = opts.render != "never" or bool(opts.render_hosts)
        if no_wait:
            _check_no_wait(settings, embedded, int(renders))
        logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="crawler-logs-"))
        named = _broker_named(broker)
        live = stack.enter_context(cluster(settings, embedded, logs, named, int(renders)))
        _check_on_item(live, opts)
        more = seeds_file.rest() if seeds_file else ()
        summary, interrupted = run(live, opts, no_wait, more, as_json)
    if summary is not None:
        click.echo(cli.dumps(summary.to_json(), indent=2) if as_json else summary_text(summary))
    if interrupted:
        return INTERRUPTED
    return CRAWL_FAILED if summary is not None and summary.failed else 0


#: Exit status of a crawl stopped by an error of its setup (a hook no worker can import), or
#: one that fetched nothing because every TLS handshake failed (a CA it was not given).
CRAWL_FAILED = 1


#: Parameters of ``crawler crawl`` that are not crawl options.
_NOT_OPTIONS = ("seeds", "seeds_file", "broker", "embedded", "no_wait", "as_json", "option_items")


def _seeds_file(ctx: click.Context, stack: contextlib.ExitStack) -> SeedsFile | None:
    from .seeds import SeedsFile

    path = ctx.params["seeds_file"]
    if path is None:
        if not ctx.params["seeds"]:
            raise Fail("give seed URLs, or --seeds-file FILE (one URL a line, '-': stdin)")
        return None
    seeds_file = SeedsFile(path)
    stack.callback(seeds_file.close)
    return seeds_file


#: Named flags whose crawl option has another name.
_RENAMED = {"default_rate": "rate"}


def crawl_options(
    ctx: click.Context, settings: Settings, seeds_file: SeedsFile | None = None
) -> CrawlOptions:
    """The crawl a ``crawler crawl`` command line asks for: named flags and ``--option``
    items, and the seeds file's every line, checked once, before anything is started or
    written."""
    from .crawl import plan

    params = {k: v for k, v in ctx.params.items() if k not in _NOT_OPTIONS}
    extra = parse_options(ctx.params["option_items"])
    for name in params:
        key = _RENAMED.get(name, name)
        if key in extra and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            flag = next(p.opts[0] for p in ctx.command.params if p.name == name)
            raise Fail(f"--option {key}: also given as {flag}; give it once")
    named = {_RENAMED.get(k, k): v for k, v in params.items()}
    named["rates"] = _parse_rates(named["rates"])
    named.update(_request_settings(named))
    named = {k: v for k, v in named.items() if v not in (None, ())}
    options = {**named, **extra}  # --option over what an unused flag gives (False...)
    seeds = list(ctx.params["seeds"])
    if seeds_file is not None:
        private = bool(options.get("allow_private_networks"))
        seeds += seeds_file.check(private)
        if not options.get("allowed_domains"):  # the default scope: every seed's host
            hosts = dict.fromkeys(host_of(normalize(u)) for u in ctx.params["seeds"])
            options["allowed_domains"] = [*hosts, *seeds_file.hosts]
    return plan(seeds, settings, **options)


def _broker_named(broker: str | None) -> bool:
    """The user named a broker (flag or environment): it is never replaced by a fallback."""
    names = ("CRAWLER_BROKER_URL", "CRAWLER_REDIS_URL")
    return broker is not None or any(os.environ.get(name) for name in names)


def _check_output(explicit: str, local: str) -> None:
    """The output this command knows is written on this host (--output, or the embedded
    workers' CRAWLER_OUTPUT_DIR) must be writable, and an s3:// output's bucket there and
    open to these credentials: refused before the crawl exists."""
    from ..state import objects
    from ..worker.output.read import unwritable

    if objects.is_url(explicit):
        try:
            objects.store_for(explicit).check()
        except CrawlerError as exc:  # StoreUnavailable; ConfigError without boto3
            raise Fail(f"--output {explicit}: {getattr(exc, 'why', exc)}") from None
        explicit = ""  # the workers' CRAWLER_OUTPUT_DIR stages it
    for flag, directory in (("--output", explicit), ("CRAWLER_OUTPUT_DIR", local)):
        why = unwritable(directory) if directory else None
        if why:
            raise Fail(f"{flag} {directory}: cannot write there ({why})")


def _check_no_wait(settings: Settings, embedded: bool, renders: int = 0) -> None:
    """--no-wait returns at once: the crawl must be served by workers that stay (render
    workers too when it renders: its pages would wait on ``crawl.render`` for none)."""
    from .probe import problem

    where = redact(settings.broker_url)
    if embedded:
        raise Fail("--no-wait cannot be used with --embedded (embedded runs end with the command)")
    why = problem(settings)
    if why is not None:
        raise Fail(f"--no-wait needs a running broker: {why}")
    if not _has_crawl_workers(settings):
        raise Fail(
            f"--no-wait: no worker consumes the crawl queues at {where}; start workers "
            "(docs/operations/workers.md) or drop --no-wait"
        )
    if renders and not _has_crawl_workers(settings, renders):
        raise Fail(
            f"--no-wait: the crawl renders and no worker consumes crawl.render at {where} (a "
            "render worker without its browser refuses to start: see its log); start one "
            "(README, 'Rendering JavaScript') or drop --no-wait"
        )
