"""``crawler dashboard``: a web page over the crawls' Redis (Tornado, from the ``ops`` extra).

Two pages (every crawl; one crawl) and the JSON API they poll:

    GET  /api/crawls                    every recent crawl's progress() (figures.crawls_list)
    GET  /api/crawls/ID                 figures.crawl_figures: what `crawler status --json` prints
    GET  /api/crawls/ID/page            the crawl page's data (figures.crawl_page)
    GET  /api/crawls/ID/hosts?sort=pending&desc=1&offset=0&limit=50   the host table
    POST /api/crawls/ID/pause|resume|cancel|retry_failed               the CLI's functions
    POST /api/crawls/ID/rate  host=H rate=R|default                    `crawler set-rate`

Every POST needs Tornado's XSRF token (the ``_xsrf`` cookie sent back as ``X-XSRFToken``),
and each action is kept in the crawl's action log and published as an event
(state/events.action). With ``CRAWLER_DASHBOARD_AUTH=user:password`` every request needs
HTTP basic auth; without it the dashboard serves loopback only, and answers only requests
naming a loopback host (a page on another site that rebinds its name to 127.0.0.1 gets 403).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
from importlib import resources
from typing import Any

import click

from .cli_common import Fail, broker_option

#: Hosts a request may name when the dashboard runs without auth (DNS rebinding).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def check_bind(address: str, auth: str) -> None:
    """A non-loopback address needs auth; auth must be ``user:password``. Never says the
    secret."""
    if auth and (":" not in auth or not auth.partition(":")[0] or not auth.partition(":")[2]):
        raise Fail("CRAWLER_DASHBOARD_AUTH: expected user:password")
    if auth:
        return
    try:
        loopback = ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        loopback = address == "localhost"
    if not loopback:
        raise Fail(
            f"dashboard on {address}: not a loopback address, and CRAWLER_DASHBOARD_AUTH "
            "(user:password) is not set; set it, or bind 127.0.0.1"
        )


def authorized(header: str | None, auth: str) -> bool:
    """An ``Authorization: Basic ...`` header naming ``auth`` (compared in constant time)."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(given, auth.encode())


def static_dir() -> str:
    return str(resources.files("crawler_tasks.surface").joinpath("dashboard_static"))


def make_app(client: Any, settings: Any) -> Any:
    """The Tornado application (its handlers: surface/dashboard_web.py)."""
    from .dashboard_web import application

    return application(client, settings, static_dir())


@click.command()
@broker_option
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: setting, 8787).")
def dashboard(broker: str | None, address: str, port: int | None) -> None:
    """Serve the crawl dashboard (web page and JSON API) until interrupted."""
    from .cli_common import connect, settings_for

    settings = settings_for(broker)
    check_bind(address, settings.dashboard_auth)  # before anything is bound or connected
    settings, client = connect(broker)
    port = settings.dashboard_port if port is None else port
    try:
        import tornado  # noqa: F401
    except ImportError:
        raise Fail("the dashboard needs Tornado: pip install 'crawler-tasks[ops]'") from None
    import asyncio

    asyncio.run(_serve(make_app(client, settings), address, port))


async def _serve(app: Any, address: str, port: int) -> None:
    try:
        server = app.listen(port, address=address, xheaders=False)
    except OSError as exc:
        raise Fail(
            f"cannot serve the dashboard on {address}:{port}: {exc.strerror or exc}"
        ) from None
    bound = next(iter(server._sockets.values())).getsockname()[1]
    host = f"[{address}]" if ":" in address else address
    click.echo(f"dashboard on http://{host}:{bound}/", err=True)
    import asyncio

    try:
        await asyncio.Event().wait()
    finally:
        server.stop()


def executor() -> Any:
    """Threads for the Redis reads (Tornado's loop must not wait on Redis)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=8, thread_name_prefix="dashboard")


def dumps(value: Any) -> str:
    """JSON as the API sends it: infinities (a host with no limit) as null."""
    return json.dumps(_finite(value), default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
