"""The dashboard's Tornado application, as Flower's ``app.py`` builds its own: one
:class:`DashboardState` for every handler, and the routes of surface/dashboard_views.py.
The command that serves it is surface/dashboard.py."""

from __future__ import annotations

import redis
import tornado.web

from ..settings import Settings
from .dashboard_access import static_dir
from .dashboard_state import DashboardState
from .dashboard_views import Static, routes


def make_app(client: redis.Redis, settings: Settings, static: str = "") -> tornado.web.Application:
    state = DashboardState(client, settings, static or static_dir())
    return tornado.web.Application(
        routes(state),
        static_path=state.static,
        static_handler_class=Static,
        dashboard_auth=settings.dashboard_auth,
        xsrf_cookies=True,
        xsrf_cookie_kwargs={"samesite": "Strict"},
        log_function=lambda handler: None,
    )
