"""`crawler dashboard`: its JSON API shows the figures `crawler status --json` prints (one
function computes both), basic auth, XSRF, the controls and their events, the bind check, the
host table's sorting and paging, the time series. A real dashboard process, real Redis, a real
worker and HTTP site on loopback. (Its pages in a browser: test_dashboard_browser.py.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import requests

from crawler_tasks import start_crawl
from crawler_tasks.state.series import Series
from crawler_tasks.surface.embedded import free_port
from tests.support.dashboard_server import AUTH, dashboard, session
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

#: Figures that change by the second on their own (a rate window, Redis's own memory).
VOLATILE = {"recent_pages_per_s", "eta_s", "redis_memory"}


def _status_json(settings, crawl_id: str) -> dict:  # type: ignore[no-untyped-def]
    out = subprocess.run(
        [sys.executable, "-m", "crawler_tasks.surface.cli", "status", crawl_id, "--json"],
        env={**os.environ, "CRAWLER_BROKER_URL": settings.broker_url},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def comparable(figures: dict) -> dict:  # type: ignore[type-arg]
    """Figures as the API sends them (infinity as null), without the volatile ones."""
    text = json.dumps({k: v for k, v in figures.items() if k not in VOLATILE}, default=str)
    return json.loads(text.replace("Infinity", "null"))


def test_api_figures_equal_status_json_after_the_crawl(settings, celery_worker):
    with running_sites(["127.0.0.31"], 12, 3) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True, rate=50.0
        )
        crawl.wait(timeout=60)
    with dashboard(settings.broker_url) as base:
        api = requests.get(f"{base}/api/crawls/{crawl.id}", auth=AUTH, timeout=10).json()
        listed = requests.get(f"{base}/api/crawls", auth=AUTH, timeout=10).json()["crawls"]
    status = _status_json(settings, crawl.id)
    assert api["done"] == crawl.summary()["counters"]["done"] > 10
    assert comparable(api) == comparable(status)
    (row,) = [c for c in listed if c["crawl_id"] == crawl.id]
    shown = {k: v for k, v in row.items() if k not in VOLATILE | {"seeds", "started_at", "age_s"}}
    assert shown == {k: v for k, v in comparable(crawl.progress()).items() if k in shown}
    assert set(shown) >= {"done", "admitted", "failed", "pages_per_s", "status"}


def test_auth_xsrf_and_the_controls_with_their_events(settings):
    crawl = start_crawl(["http://127.0.0.32:9/"], settings=settings, allow_private_networks=True)
    heard: list[dict] = []
    pubsub = crawl.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(crawl.ck.events)
    with dashboard(settings.broker_url) as base:
        url = f"{base}/api/crawls/{crawl.id}"
        anonymous = requests.get(url, timeout=5)
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
        assert requests.get(url, auth=("operator", "wrong"), timeout=5).status_code == 401
        assert requests.get(f"{base}/static/dashboard.js", timeout=5).status_code == 401
        # Authenticated but no XSRF token (a forged cross-site POST): refused, nothing done.
        forged = requests.post(url + "/pause", auth=AUTH, timeout=5)
        assert forged.status_code == 403
        assert not crawl.store.lifecycle.read().paused
        s = session(base)
        assert s.post(url + "/pause", timeout=5).json()["ok"]
        assert crawl.store.lifecycle.read().paused
        assert s.post(url + "/pause", timeout=5).ok  # pausing a paused crawl is fine, as in the CLI
        assert s.post(url + "/resume", timeout=5).ok
        assert not crawl.store.lifecycle.read().paused
        # "Set rate" is this crawl's own rate for the host, not the cluster-wide set-rate...
        rate = s.post(url + "/rate", data={"host": "127.0.0.32", "rate": "0.5"}, timeout=5)
        assert rate.ok, rate.text
        (domain,) = crawl.domains()
        assert domain["override"] == "0.5" and domain["cluster_rate"] is None
        assert crawl.client.hget(crawl.keys.rates, "127.0.0.32") is None
        other = start_crawl(
            ["http://127.0.0.32:9/x"], settings=settings, allow_private_networks=True
        )
        assert other.domains()[0]["override"] is None, "another crawl of the host: untouched"
        # ... and the ceiling every crawl of the host shares is a control of its own.
        ceiling = s.post(url + "/ceiling", data={"host": "127.0.0.32", "rate": "2"}, timeout=5)
        assert ceiling.ok, ceiling.text
        assert crawl.client.hget(crawl.keys.ceilings, "127.0.0.32") == b"2.0"
        inf = s.post(url + "/ceiling", data={"host": "127.0.0.32", "rate": "inf"}, timeout=5)
        assert inf.status_code == 400, inf.text
        huge = s.post(url + "/rate", data={"host": "127.0.0.32", "rate": "1e400"}, timeout=5)
        assert huge.status_code == 400 and "> 0" in huge.json()["error"]
        bad = s.post(url + "/rate", data={"host": "http://x/", "rate": "0.5"}, timeout=5)
        assert bad.status_code == 400 and "host name" in bad.json()["error"]
        assert s.post(url + "/retry_failed", timeout=5).json()["event"]["requeued"] == 0
        assert s.post(url + "/cancel", timeout=5).ok
        page = s.get(url + "/page", timeout=5).json()
        assert s.get(f"{base}/api/crawls/nope", timeout=5).status_code == 404
    while msg := pubsub.get_message(timeout=1.0) or pubsub.get_message(timeout=1.0):
        heard.append(json.loads(msg["data"]))
    pubsub.close()
    wanted = ["retry_failed", "set_rate", "set_ceiling", "resume", "pause", "pause", "cancel"]
    assert sorted(a["action"] for a in page["actions"]) == sorted(wanted)
    assert all(a["by"] == "operator" for a in page["actions"])
    assert sorted(e["action"] for e in heard if e["event"] == "action") == sorted(wanted)


def test_bind_check_refuses_before_binding(settings):
    port = free_port()
    env = {**os.environ, "CRAWLER_BROKER_URL": settings.broker_url}
    cmd = [sys.executable, "-m", "crawler_tasks.surface.cli", "dashboard", "--port", str(port)]
    exposed = subprocess.run(
        [*cmd, "--address", "0.0.0.0"], env=env, capture_output=True, text=True
    )
    assert exposed.returncode == 2, exposed.stderr
    assert exposed.stderr.count("\n") == 1 and "CRAWLER_DASHBOARD_AUTH" in exposed.stderr
    malformed = subprocess.run(
        [*cmd, "--address", "0.0.0.0"],
        env={**env, "CRAWLER_DASHBOARD_AUTH": "no-colon-secret"},
        capture_output=True,
        text=True,
    )
    assert malformed.returncode == 2 and "user:password" in malformed.stderr
    assert "no-colon-secret" not in malformed.stderr + malformed.stdout


def test_without_auth_only_loopback_host_names_are_answered(settings):
    with dashboard(settings.broker_url, auth=None) as base:
        assert requests.get(base + "/api/crawls", timeout=5).ok
        rebound = requests.get(base + "/api/crawls", headers={"Host": "evil.example"}, timeout=5)
        assert rebound.status_code == 403


def test_host_table_sorts_and_pages_on_the_server(settings):
    # 300 hosts with 1..300 pending URLs each (admitted, no worker: they stay pending).
    urls = [f"http://h{i}.test/p{j}" for i in range(300) for j in range(i % 7 + 1)]
    crawl = start_crawl(urls[:1], settings=settings, max_depth=1, rates={"h3.test": math.inf})
    crawl.store.frontier.admit((u, 0) for u in urls[1:])
    with dashboard(settings.broker_url) as base:
        q = f"{base}/api/crawls/{crawl.id}/hosts"
        # A first read slower than the cold wait (a busy machine) answers "reading": the page
        # asks again, and so does this test.
        deadline = time.monotonic() + 60
        while (first := requests.get(q, params={"limit": 40}, auth=AUTH, timeout=10).json()).get(
            "reading"
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        last = requests.get(q, params={"offset": 280, "limit": 40}, auth=AUTH, timeout=10).json()
        by_name = requests.get(
            q, params={"sort": "domain", "desc": "0", "limit": 500}, auth=AUTH, timeout=10
        ).json()
        bad = requests.get(q, params={"sort": "password"}, auth=AUTH, timeout=10)
    assert first["total"] == 300 and len(first["rows"]) == 40 and len(last["rows"]) == 20
    backlog = [r["pending"] for r in first["rows"] + last["rows"]]
    assert backlog[:40] == sorted(backlog[:40], reverse=True) and backlog[0] == 7
    assert backlog[-1] == 1
    names = [r["domain"] for r in by_name["rows"]]
    assert names == sorted(names) and len(names) == 300
    (h3,) = [r for r in by_name["rows"] if r["domain"] == "h3.test"]
    assert h3["rate"] is None and h3["state"] == "ok"  # rate None: no limit (inf)
    assert [c[0] for c in first["columns"]][:3] == ["domain", "pending", "in_flight"]
    assert "render" not in [c[0] for c in first["columns"]]  # no render state: no column
    assert bad.status_code == 400


def test_host_table_shows_each_hosts_render_state(settings):
    # render="auto" with one host forced "always": four auto hosts told different evidence
    # through the real render_plan.lua, one never asked; all pending (no worker runs).
    hosts = ["raw.test", "js.test", "half.test", "new.test", "forced.test"]
    urls = [f"http://{h}/p{j}" for h in hosts for j in range(2)]
    crawl = start_crawl(
        urls[:1], settings=settings, render="auto", render_hosts={"forced.test": "always"}
    )
    crawl.store.frontier.admit((u, 0) for u in urls[1:])
    plan, script = crawl.store.render_plan, b"<script>1</script>"
    for host, told in (("raw.test", [False, False]), ("js.test", [True]), ("half.test", [False])):
        for i, added in enumerate(told):
            url = f"http://{host}/p{i}"  # a URL's verdict counts once
            assert plan.wants("auto", {}, url, script)
            plan.tell(url, added)
    with dashboard(settings.broker_url) as base:
        q = f"{base}/api/crawls/{crawl.id}/hosts"
        got = requests.get(q, params={"sort": "render", "limit": 50}, auth=AUTH, timeout=10)
    assert got.ok
    body = got.json()
    assert ["render", "Render"] in body["columns"]
    states = {r["domain"]: r["render"] for r in body["rows"]}
    assert states == {
        "raw.test": "raw",
        "js.test": "render",
        "half.test": "sampling 1/2",
        "new.test": "auto",
        "forced.test": "always",
    }
    assert [r["render"] for r in body["rows"]] == sorted(states.values(), reverse=True)


def test_series_one_sample_per_interval_and_expires_with_the_crawl(settings, client):
    crawl = start_crawl(["http://127.0.0.33:9/"], settings=settings, allow_private_networks=True)
    series: Series = crawl.store.series
    assert series.points() == [[round(crawl.options.started_at, 3), 0, 0, 0, 0]]  # the start
    client.delete(crawl.store.ck.sampled, crawl.store.ck.series)
    assert series.sample(now=1000.0, every=30)
    other = crawl.store.__class__(crawl.store.r, crawl.options).series  # another process's
    assert not other.sample(now=1001.0, every=30)  # the turn was taken this interval
    series._next_try = other._next_try = 0.0  # (each process also waits every/2 itself)
    client.delete(crawl.store.ck.sampled)
    crawl.store.stats.add("done", 50)
    crawl.store.stats.add("failed", 5)
    assert series.sample(now=1010.0, every=30)
    assert not series.sample(now=1011.0, every=30)  # this process's own wait, no Redis asked
    assert series.rates() == [{"t": 1010.0, "pages_per_s": 5.0, "errors_per_s": 0.5}]
    for n in range(1500):  # bounded: the oldest go
        series.sample(now=2000.0 + n, force=True)
    assert client.llen(crawl.store.ck.series) == 1440
    crawl.store.finisher.expire(60)
    assert 0 < client.ttl(crawl.store.ck.series) <= 60


def test_dashboard_figures_move_while_the_crawl_runs(settings, celery_worker):
    with running_sites(["127.0.0.34"], 60, 3) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True, rate=15.0
        )
        with dashboard(settings.broker_url) as base:
            url = f"{base}/api/crawls/{crawl.id}/page"
            first = requests.get(url, auth=AUTH, timeout=10).json()["figures"]["done"]
            later = wait_until(
                lambda: (
                    (d := requests.get(url, auth=AUTH, timeout=10).json())["figures"]["done"]
                    > first + 5
                    and d
                ),
                timeout=30,
            )
            assert later["workers"] and all(w["alive"] for w in later["workers"])
            crawl.wait(timeout=60)
            time.sleep(0.2)
            done = requests.get(url, auth=AUTH, timeout=10).json()
    assert done["figures"]["done"] == crawl.summary()["counters"]["done"]
    assert (
        done["status_codes"] == {k: v for k, v in crawl.summary()["status_codes"].items() if v}
        or done["status_codes"] == crawl.summary()["status_codes"]
    )
    assert done["series"], "the dispatcher sampled the crawl"
    assert any(p["pages_per_s"] > 0 for p in done["series"])
    if crawl.summary()["counters"].get("failed"):
        assert done["errors"] and done["errors"][0]["url"]


def test_host_table_answers_reading_while_a_first_read_is_slow(settings, monkeypatch):
    from crawler_tasks.surface import host_table

    crawl = start_crawl(["http://a.test/", "http://b.test/x"], settings=settings)
    monkeypatch.setattr(host_table, "COLD_WAIT", 0.0)
    read = host_table.take
    monkeypatch.setattr(host_table, "take", lambda c: (time.sleep(0.3), read(c))[1])
    tables = host_table.HostTables()
    first = tables.page(crawl)
    assert first["reading"] and first["rows"] == [] and first["total"] is None
    later = wait_until(lambda: (p := tables.page(crawl))["total"] and p, timeout=10)
    assert [r["domain"] for r in later["rows"]] == ["a.test", "b.test"] and not later["reading"]


def test_redis_gone_is_a_503_saying_so_not_a_traceback():
    from crawler_tasks.surface.embedded import private_redis

    with private_redis() as url, dashboard(url) as base:
        assert requests.get(base + "/api/crawls", auth=AUTH, timeout=5).ok
        import redis as redis_py

        redis_py.Redis.from_url(url).shutdown(nosave=True)
        gone = requests.get(base + "/api/crawls", auth=AUTH, timeout=30)
    assert gone.status_code == 503 and gone.json()["error"].startswith("Redis: ")


def test_on_item_waiting_is_read_from_the_broker_without_a_worker_module(settings):
    """status --json and the dashboard show the items waiting in a crawl's on_item queue,
    read with kombu alone (the dashboard process imports no worker module)."""
    from kombu import Connection

    from crawler_tasks.surface.figures import crawl_figures

    crawl = start_crawl(
        ["http://127.0.0.33:9/"],
        settings=settings,
        allow_private_networks=True,
        on_item="myapp.tasks.store",
        on_item_queue="items-dashboard-test",
    )
    assert crawl_figures(crawl).to_json()["on_item_waiting"] == 0
    with Connection(settings.broker_url) as conn:
        queue = conn.SimpleQueue("items-dashboard-test")
        for n in range(3):
            queue.put({"n": n})
        queue.close()
    assert crawl_figures(crawl).to_json()["on_item_waiting"] == 3
