"""The dashboard's Tornado handlers (the command and its checks: surface/dashboard.py)."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import redis
import tornado.web
from tornado.ioloop import IOLoop

from ..errors import UnknownCrawl
from ..state import events
from ..state.keys import Keys
from ..state.politeness import set_rate
from ..worker.logs import Throttled
from ..worker.outage import ride_out
from .cli_common import Fail, one_line
from .crawl import Crawl
from .dashboard import LOOPBACK_NAMES, authorized, dumps, executor
from .figures import crawl_figures, crawl_page, crawls_list
from .host_table import MAX_LIMIT, SORTABLE, HostTables

#: Crawl controls: action name -> the Crawl method the CLI's command of that name calls.
log = logging.getLogger(__name__)

#: Seconds a request waits for Redis before it answers 503: beyond a cluster's failover
#: (a replica is elected ~2-4 s after its master dies, cluster-node-timeout 2 s), below what
#: a browser's poll waits.
ANSWER_WITHIN = 15.0

CONTROLS = {
    "pause": "pause",
    "resume": "resume",
    "cancel": "cancel",
    "retry_failed": "retry_failed",
}


def check_access(handler: tornado.web.RequestHandler, auth: str) -> None:
    """Basic auth when configured; else only requests naming a loopback host."""
    if auth:
        if not authorized(handler.request.headers.get("Authorization"), auth):
            raise tornado.web.HTTPError(401)
        return
    host = handler.request.host_name.lower()
    if host not in LOOPBACK_NAMES and not host.startswith("127.") and host != "::1":
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

    def initialize(self, ctx: dict[str, Any]) -> None:
        self.ctx = ctx

    def check_access(self) -> None:
        check_access(self, self.ctx["settings"].dashboard_auth)

    def check_xsrf_cookie(self) -> None:
        self.check_access()
        super().check_xsrf_cookie()

    def prepare(self) -> None:
        self.check_access()
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("X-Frame-Options", "DENY")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error_body(self, status_code, **kwargs)

    def send_json(self, value: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(dumps(value))

    async def off_loop(self, fn: Any, *args: Any) -> Any:
        """``fn`` in a thread, waiting out a cluster's failover (``ANSWER_WITHIN`` s); Redis
        gone longer or refusing answers 503 with why (the page says it and keeps polling),
        not a traceback."""
        told = Throttled(log, "dashboard: Redis")
        call = functools.partial(ride_out, lambda: fn(*args), ANSWER_WITHIN, told, max_delay=1.0)
        try:
            return await IOLoop.current().run_in_executor(self.ctx["pool"], call)
        except redis.RedisError as exc:
            raise tornado.web.HTTPError(503, f"Redis: {one_line(str(exc))}") from None

    def crawl(self, crawl_id: str) -> Crawl:
        crawl = Crawl(crawl_id, settings=self.ctx["settings"], client=self.ctx["client"])
        try:
            crawl.options  # noqa: B018
        except UnknownCrawl:
            raise tornado.web.HTTPError(404, f"no crawl {crawl_id}") from None
        return crawl


class Page(Base):
    def initialize(self, ctx: dict[str, Any], name: str = "") -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.name = name

    def get(self, crawl_id: str = "") -> None:
        self.xsrf_token  # noqa: B018 - sets the _xsrf cookie the page's script sends back
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
        with open(os.path.join(self.ctx["static"], self.name), encoding="utf-8") as f:
            self.finish(f.read())


class CrawlsApi(Base):
    async def get(self) -> None:
        s = self.ctx["settings"]
        self.send_json({"crawls": await self.off_loop(crawls_list, self.ctx["client"], s)})


class CrawlApi(Base):
    async def get(self, crawl_id: str) -> None:
        self.send_json(await self.off_loop(lambda: crawl_figures(self.crawl(crawl_id))))


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
        tables: HostTables = self.ctx["hosts"]
        page = await self.off_loop(
            lambda: tables.page(self.crawl(crawl_id), sort, desc, offset, limit)
        )
        self.send_json(page)


class ControlApi(Base):
    async def post(self, crawl_id: str, action: str) -> None:
        result = await self.off_loop(self._apply, crawl_id, action)
        self.send_json(result)

    def _apply(self, crawl_id: str, action: str) -> dict[str, Any]:
        crawl = self.crawl(crawl_id)
        if action == "rate":
            return self._set_rate(crawl)
        done = getattr(crawl, CONTROLS[action])()
        if done is False:
            raise tornado.web.HTTPError(
                409, f"crawl {crawl_id} is {crawl.status}: nothing to {action}"
            )
        extra = {"requeued": done} if action == "retry_failed" else {}
        event = self._record(crawl, action, **extra)
        return {"ok": True, "event": event}

    def _set_rate(self, crawl: Crawl) -> dict[str, Any]:
        from .commands import parse_host, parse_rate

        try:
            host = parse_host(self.get_body_argument("host", ""))
            rate = parse_rate(self.get_body_argument("rate", ""))
        except Fail as exc:
            raise tornado.web.HTTPError(400, exc.format_message()) from None
        set_rate(crawl.client, Keys(crawl.settings.key_prefix), host, rate)
        shown = "default" if rate is None else rate
        return {"ok": True, "event": self._record(crawl, "set_rate", host=host, rate=shown)}

    def _record(self, crawl: Crawl, action: str, **data: Any) -> dict[str, Any]:
        store = crawl.store
        who = self.ctx["settings"].dashboard_auth.partition(":")[0] or "dashboard"
        return events.action(
            crawl.client, store.ck, store.r.scripts, crawl.id, action, by=who, **data
        )


def application(client: redis.Redis, settings: Any, static: str) -> tornado.web.Application:
    ctx = {
        "client": client,
        "settings": settings,
        "static": static,
        "pool": executor(),
        "hosts": HostTables(),
    }
    crawl = r"/api/crawls/([^/]+)"
    actions = "|".join([*CONTROLS, "rate"])
    handlers: list[Any] = [
        (r"/", Page, {"ctx": ctx, "name": "crawls.html"}),
        (r"/crawls/([^/]+)", Page, {"ctx": ctx, "name": "crawl.html"}),
        (r"/api/crawls", CrawlsApi, {"ctx": ctx}),
        (crawl, CrawlApi, {"ctx": ctx}),
        (crawl + "/page", CrawlPageApi, {"ctx": ctx}),
        (crawl + "/hosts", HostsApi, {"ctx": ctx}),
        (crawl + f"/({actions})", ControlApi, {"ctx": ctx}),
    ]
    return tornado.web.Application(
        handlers,
        static_path=static,
        static_handler_class=Static,
        dashboard_auth=settings.dashboard_auth,
        xsrf_cookies=True,
        xsrf_cookie_kwargs={"samesite": "Strict"},
        log_function=lambda handler: None,
    )
