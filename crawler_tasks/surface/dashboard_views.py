"""The dashboard's handlers (as Flower's ``views/``): each reads the typed
:class:`~crawler_tasks.surface.dashboard_state.DashboardState` it is given, never a dict.

    GET  /api/crawls                    every recent crawl's progress (figures.crawls_list)
    GET  /api/crawls/ID                 figures.crawl_figures as JSON: what `crawler status --json` prints
    GET  /api/crawls/ID/page            the crawl page's data (figures.crawl_page)
    GET  /api/crawls/ID/hosts?sort=pending&desc=1&offset=0&limit=50   the host table
    POST /api/crawls/ID/pause|resume|cancel|retry_failed               the CLI's functions
    POST /api/crawls/ID/rate     host=H rate=R|default   THIS crawl's rate for H (Crawl.set_host_rate)
    POST /api/crawls/ID/ceiling  host=H rate=R|default   H's ceiling for every crawl (set-ceiling)

Every POST needs Tornado's XSRF token (the ``_xsrf`` cookie sent back as ``X-XSRFToken``),
and each action is kept in the crawl's action log and published as an event."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import redis
import tornado.web
from tornado.ioloop import IOLoop

from ..errors import ConfigError, UnknownCrawl
from ..state.ceilings import set_ceiling
from ..state.connection import wait_out
from ..web.host_rates import host_name, rate_value
from .crawl import Crawl
from .dashboard_access import authorized, dumps, loopback_name
from .dashboard_state import DashboardState
from .figures import crawl_figures, crawl_page, crawls_list
from .host_table import MAX_LIMIT, SORTABLE

#: Seconds a request waits for Redis before it answers 503: beyond a cluster's failover
#: (a replica is elected ~2-4 s after its master dies, cluster-node-timeout 2 s), below what
#: a browser's poll waits.
ANSWER_WITHIN = 15.0

#: Crawl controls: action name -> the Crawl method the CLI's command of that name calls.
CONTROLS = {
    "pause": "pause",
    "resume": "resume",
    "cancel": "cancel",
    "retry_failed": "retry_failed",
}
#: Rate controls: action name -> what it sets (this crawl's host rate; every crawl's ceiling).
RATES = ("rate", "ceiling")


def check_access(handler: tornado.web.RequestHandler, auth: str) -> None:
    """Basic auth when configured; else only requests naming a loopback host."""
    if auth:
        if not authorized(handler.request.headers.get("Authorization"), auth):
            raise tornado.web.HTTPError(401)
        return
    if not loopback_name(handler.request.host_name):
        raise tornado.web.HTTPError(403, "unknown Host")


def error_body(handler: tornado.web.RequestHandler, status_code: int, **kwargs: Any) -> None:
    """Errors as JSON with their message (never a traceback); a 401 asks for basic auth."""
    if status_code == 401:
        handler.set_header("WWW-Authenticate", 'Basic realm="crawler dashboard"')
    exc = kwargs.get("exc_info", (None, None))[1]
    message = getattr(exc, "log_message", None) or handler._reason
    handler.set_header("Content-Type", "application/json")
    handler.finish(dumps({"error": message}))


class Static(tornado.web.StaticFileHandler):
    """The pages' script and style, behind the same access check."""

    def prepare(self) -> None:
        check_access(self, self.settings["dashboard_auth"])

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error_body(self, status_code, **kwargs)


class Base(tornado.web.RequestHandler):
    """Auth (or, without auth, loopback Host names only) before anything else, POSTs too:
    Tornado checks the XSRF token before ``prepare``, so the check runs there first."""

    def initialize(self, state: DashboardState) -> None:
        self.state = state

    def check_xsrf_cookie(self) -> None:
        check_access(self, self.state.auth)
        super().check_xsrf_cookie()

    def prepare(self) -> None:
        check_access(self, self.state.auth)
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("X-Frame-Options", "DENY")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error_body(self, status_code, **kwargs)

    def send_json(self, value: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(dumps(value))

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn`` in a thread, waiting out a cluster's failover (``ANSWER_WITHIN`` s); Redis
        gone longer or refusing answers 503 with why (the page says it and keeps polling), a
        crawl not there 404, not a traceback."""
        call = functools.partial(wait_out, lambda: fn(*args), ANSWER_WITHIN, max_delay=1.0)
        try:
            return await IOLoop.current().run_in_executor(self.state.pool, call)
        except redis.RedisError as exc:
            raise tornado.web.HTTPError(503, f"Redis: {' '.join(str(exc).split())}") from None
        except UnknownCrawl as exc:
            raise tornado.web.HTTPError(404, f"no crawl {exc.args[0]}") from None

    def crawl(self, crawl_id: str) -> Crawl:
        return self.state.crawl(crawl_id)


class Page(Base):
    def initialize(self, state: DashboardState, name: str = "") -> None:  # type: ignore[override]
        super().initialize(state)
        self.name = name

    def get(self, crawl_id: str = "") -> None:
        self.xsrf_token  # noqa: B018 - sets the _xsrf cookie the page's script sends back
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
        with open(os.path.join(self.state.static, self.name), encoding="utf-8") as f:
            self.finish(f.read())


class CrawlsApi(Base):
    async def get(self) -> None:
        s = self.state
        self.send_json({"crawls": await self.off_loop(crawls_list, s.client, s.settings)})


class CrawlApi(Base):
    async def get(self, crawl_id: str) -> None:
        self.send_json(await self.off_loop(lambda: crawl_figures(self.crawl(crawl_id)).to_json()))


class CrawlPageApi(Base):
    async def get(self, crawl_id: str) -> None:
        self.send_json(await self.off_loop(lambda: crawl_page(self.crawl(crawl_id))))


class HostsApi(Base):
    async def get(self, crawl_id: str) -> None:
        sort = self.get_argument("sort", "pending")
        if sort not in SORTABLE:
            raise tornado.web.HTTPError(400, f"sort: one of {', '.join(sorted(SORTABLE))}")
        try:
            offset = max(0, int(self.get_argument("offset", "0")))
            limit = min(MAX_LIMIT, max(1, int(self.get_argument("limit", "50"))))
        except ValueError:
            raise tornado.web.HTTPError(400, "offset and limit: whole numbers") from None
        desc = self.get_argument("desc", "1") != "0"
        tables = self.state.hosts
        page = await self.off_loop(
            lambda: tables.page(self.crawl(crawl_id), sort, desc, offset, limit)
        )
        self.send_json(page)


class ControlApi(Base):
    async def post(self, crawl_id: str, action: str) -> None:
        result = await self.off_loop(self._apply, crawl_id, action)
        # The host table shows the change at the page's next read (a ceiling: every crawl's).
        self.state.hosts.forget(None if action == "ceiling" else crawl_id)
        self.send_json(result)

    def _apply(self, crawl_id: str, action: str) -> dict[str, Any]:
        crawl = self.crawl(crawl_id)
        if action in RATES:
            return self._set_rate(crawl, action)
        done = getattr(crawl, CONTROLS[action])()
        if done is False:
            raise tornado.web.HTTPError(
                409, f"crawl {crawl_id} is {crawl.status}: nothing to {action}"
            )
        extra = {"requeued": done} if action == "retry_failed" else {}
        event = crawl.store.record_action(action, by=self.state.operator, **extra)
        return {"ok": True, "event": event}

    def _set_rate(self, crawl: Crawl, action: str) -> dict[str, Any]:
        try:
            host = host_name(self.get_body_argument("host", ""))
            rate = rate_value(self.get_body_argument("rate", ""))
            if action == "rate":
                crawl.store.set_host_rate(host, rate)
            else:
                set_ceiling(crawl.client, crawl.keys, host, rate)
        except (ConfigError, ValueError) as exc:
            raise tornado.web.HTTPError(400, str(exc)) from None
        shown = "default" if rate is None else rate
        event = crawl.store.record_action(
            f"set_{action}", by=self.state.operator, host=host, rate=shown
        )
        return {"ok": True, "event": event}


def routes(state: DashboardState) -> list[Any]:
    crawl = r"/api/crawls/([^/]+)"
    actions = "|".join([*CONTROLS, *RATES])
    given = {"state": state}
    return [
        (r"/", Page, {**given, "name": "crawls.html"}),
        (r"/crawls/([^/]+)", Page, {**given, "name": "crawl.html"}),
        (r"/api/crawls", CrawlsApi, given),
        (crawl, CrawlApi, given),
        (crawl + "/page", CrawlPageApi, given),
        (crawl + "/hosts", HostsApi, given),
        (crawl + f"/({actions})", ControlApi, given),
    ]
