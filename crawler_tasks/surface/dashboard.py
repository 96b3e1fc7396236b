"""``crawler dashboard``: a web page over the crawls' Redis (Tornado, from the ``ops`` extra).

The command and its bind check only: the application is surface/dashboard_app.py, its
handlers and API surface/dashboard_views.py, what they share surface/dashboard_state.py.

Every POST needs Tornado's XSRF token, and each action is kept in the crawl's action log and
published as an event (state/events.action). With ``CRAWLER_DASHBOARD_AUTH=user:password``
every request needs HTTP basic auth; without it the dashboard serves loopback only, and
answers only requests naming a loopback host (a page on another site that rebinds its name
to 127.0.0.1 gets 403).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import click

from .cli_common import Fail, broker_option


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

    from .dashboard_app import make_app

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
