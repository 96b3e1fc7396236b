"""A crawl's own request settings, driven in-process (tests/support/driver.py): user agent, headers,
cookies and basic auth per host, and a proxy (a small HTTP proxy on loopback, written here)
are what the servers receive; the secrets (given as env:NAME) appear nowhere else: not in
Redis (MONITOR), the logs, or the output files."""

from __future__ import annotations

import base64
import gzip
import http.client
import logging
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from crawler_tasks import start_crawl
from crawler_tasks.errors import ConfigError
from tests.support.driver import Driver
from tests.support.sitegen import _simple_page, serve_hosts

AUTH = "site-user:pa55-site-secret"
COOKIE = "cookie-secret-value"
TOKEN = "token-secret-value"
PROXY_CREDS = "proxy-user:proxy-secret-pw"
SECRETS = ("pa55-site-secret", COOKIE, TOKEN, "proxy-secret-pw")


@pytest.fixture
def driver(settings, monkeypatch) -> Iterator[Driver]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SITE_AUTH", AUTH)
    monkeypatch.setenv("SITE_COOKIE", COOKIE)
    monkeypatch.setenv("SITE_LANG", "en")
    monkeypatch.setenv("API_TOKEN", TOKEN)
    d = Driver(settings)
    yield d
    d.close()


class Proxy:
    """A forward HTTP proxy on loopback that wants Proxy-Authorization and logs what it got."""

    def __init__(self, address: str, creds: str) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        want = "Basic " + base64.b64encode(creds.encode()).decode()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                proxy.seen.append((self.path, dict(self.headers)))
                if self.headers.get("Proxy-Authorization") != want:
                    self.send_response(407)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._forward()

            def _forward(self) -> None:
                target = urlsplit(self.path)
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=5)
                drop = ("proxy-authorization", "proxy-connection", "connection")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
                path = target.path + (f"?{target.query}" if target.query else "")
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                conn.close()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{creds}@{address}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Monitor:
    """Every command Redis executes while it runs (MONITOR), as text."""

    def __init__(self, url: str) -> None:
        self.lines: list[str] = []
        self._client = redis.Redis.from_url(url)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        with self._client.monitor() as m:
            self._ready.set()
            for cmd in m.listen():
                self.lines.append(str(cmd["command"]))
                if "END-OF-MONITOR" in cmd["command"]:
                    return

    def stop(self) -> str:
        self._client.echo("END-OF-MONITOR")
        self._thread.join(5)
        return "\n".join(self.lines)


def output_text(root: Path) -> str:
    """Every output file as text (the WARC decompressed)."""
    parts = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            parts.append(
                (gzip.decompress(data) if path.suffix == ".gz" else data).decode("latin-1")
            )
    return "\n".join(parts)


def page(*hrefs: str):  # type: ignore[no-untyped-def]
    return lambda h: h.send_body(200, _simple_page(h.path_only, hrefs), "text/html")


def test_headers_cookies_and_auth_go_to_their_hosts_only(settings, driver, redis_url, caplog):  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    with serve_hosts(None, ["127.0.0.160", "127.0.0.161"], extra_routes={}) as (a, b):
        a.extra_routes = {"/": page("/in", b.base_url + "/out"), "/in": page()}
        b.extra_routes = {"/out": page()}
        monitor = Monitor(redis_url)
        crawl = start_crawl(
            [a.base_url + "/"],
            settings=settings,
            allow_private_networks=True,
            allowed_domains=["127.0.0.160", "127.0.0.161"],
            rate=math.inf,
            user_agent="probe-bot/2.0",
            headers={"X-Team": "crawlers", "Authorization-Token": "x", "X-Api": "env:API_TOKEN"},
            cookies={"127.0.0.160": {"session": "env:SITE_COOKIE", "lang": "env:SITE_LANG"}},
            auth={"127.0.0.160": "env:SITE_AUTH"},
        )
        driver.run(crawl)
        redis_text = monitor.stop()
        seen_a, seen_b = a.requests(), b.requests()
    basic = "Basic " + base64.b64encode(AUTH.encode()).decode()
    assert sorted(r.path for r in seen_a) == ["/", "/in", "/robots.txt"]
    for r in seen_a:
        assert r.headers["User-Agent"] == "probe-bot/2.0"
        assert (r.headers["X-Team"], r.headers["X-Api"]) == ("crawlers", TOKEN)
        assert r.headers["Authorization"] == basic
        assert sorted(r.headers["Cookie"].split("; ")) == ["lang=en", f"session={COOKIE}"]
    assert sorted(r.path for r in seen_b) == ["/out", "/robots.txt"]
    for r in seen_b:  # another host: the crawl's headers, not a's auth and cookies
        assert r.headers["User-Agent"] == "probe-bot/2.0" and r.headers["X-Team"] == "crawlers"
        assert "Authorization" not in r.headers and "Cookie" not in r.headers
    assert {r["status"] for r in crawl.pages()} == {200}
    warc = output_text(crawl.output_dir)
    assert "User-Agent: probe-bot/2.0" in warc and "X-Team: crawlers" in warc
    assert "env:SITE_AUTH" in redis_text  # the references travel, the values don't
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for secret in SECRETS:
        assert secret not in redis_text and secret not in warc and secret not in logs


def test_through_a_proxy_with_credentials(settings, driver, redis_url, monkeypatch, caplog):  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    proxy = Proxy("127.0.0.162", PROXY_CREDS)
    monkeypatch.setenv("CRAWL_PROXY", proxy.url)
    try:
        routes = {"/": page("/a"), "/a": page()}
        with serve_hosts(None, ["127.0.0.163"], extra_routes=routes) as (server,):
            monitor = Monitor(redis_url)
            crawl = start_crawl(
                [server.base_url + "/"],
                settings=settings,
                allow_private_networks=True,
                rate=math.inf,
                user_agent="proxied-bot/1.0",
                proxy="env:CRAWL_PROXY",
            )
            driver.run(crawl)
            redis_text = monitor.stop()
            direct = server.requests()
    finally:
        proxy.close()
    want = "Basic " + base64.b64encode(PROXY_CREDS.encode()).decode()
    paths = sorted(urlsplit(path).path for path, _ in proxy.seen)
    assert paths == ["/", "/a", "/robots.txt"]
    assert all(h["Proxy-Authorization"] == want for _, h in proxy.seen)
    assert all(h["User-Agent"] == "proxied-bot/1.0" for _, h in proxy.seen)
    # The site saw those requests from the proxy, without the proxy's credentials.
    assert sorted(r.path for r in direct) == ["/", "/a", "/robots.txt"]
    assert all("Proxy-Authorization" not in r.headers for r in direct)
    assert {r["status"] for r in crawl.pages()} == {200}
    everything = redis_text + output_text(crawl.output_dir)
    everything += "\n".join(r.getMessage() for r in caplog.records)
    for secret in SECRETS:
        assert secret not in everything


def test_a_dead_proxy_fails_urls_without_telling_its_password(settings, driver, monkeypatch):  # type: ignore[no-untyped-def]
    proxy = Proxy("127.0.0.164", PROXY_CREDS)
    proxy.close()  # nobody listens there any more
    monkeypatch.setenv("CRAWL_PROXY", proxy.url)
    crawl = start_crawl(
        ["http://127.0.0.165:9/"],
        settings=settings,
        allow_private_networks=True,
        rate=math.inf,
        obey_robots=False,
        max_retries=0,
        proxy="env:CRAWL_PROXY",
    )
    driver.run(crawl)
    (record,) = crawl.pages()
    assert record["error"] == "connection_error"
    assert "proxy-secret-pw" not in output_text(crawl.output_dir)


def test_a_missing_secret_fails_the_url_naming_the_variable(settings, driver):  # type: ignore[no-untyped-def]
    with serve_hosts(None, ["127.0.0.166"], extra_routes={"/": page()}) as (server,):
        crawl = start_crawl(
            [server.base_url + "/"],
            settings=settings,
            allow_private_networks=True,
            obey_robots=False,
            auth={"127.0.0.166": "env:NOT_SET_ANYWHERE"},
        )
        driver.run(crawl)
        assert server.requests() == []
    (record,) = crawl.pages()
    assert record["error"] == "missing_secret"
    assert "NOT_SET_ANYWHERE" in record["detail"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"auth": {"h": "user:password"}}, "auth must map hosts to 'env:NAME'"),
        ({"proxy": "http://user:pw@proxy:3128"}, "proxy must be"),
        ({"headers": {"Authorization": "Bearer abc"}}, "carries a secret"),
        ({"headers": {"User-Agent": "x"}}, "crawler's own"),
        ({"cookies": {"h": "session=1"}}, "cookies must map"),
        ({"cookies": {"h": {"session": "abc"}}}, r"cookies must map hosts to \{name: 'env:NAME'\}"),
    ],
)
def test_secrets_are_refused_as_values(settings, options, message):  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        start_crawl(
            ["http://127.0.0.167/"], settings=settings, allow_private_networks=True, **options
        )
