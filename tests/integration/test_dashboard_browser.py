"""The dashboard's two pages in a real browser (headless Debian Chromium through Playwright)
over a real crawl: no console errors, the figures the page shows are `crawler status --json`'s,
they move while the crawl runs, every control works and shows in the crawl's events, a
request without auth gets 401 and a forged POST without the XSRF token is refused.

``DOCS_SCREENSHOTS=1`` saves both pages at 1400x900 as docs/img/dashboard-crawl.png and
dashboard-crawls.png, the screenshots the docs' Dashboard page shows (so they show the current
page); ``DASHBOARD_SCREENSHOTS=DIR`` saves them under DIR instead."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler_tasks import start_crawl
from tests.integration.test_dashboard import _status_json
from tests.support.dashboard_server import AUTH, dashboard
from tests.support.paths import ROOT
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1400, "height": 900}

#: How long a page may take to show a change (ms): the dashboard polls every few seconds, and
#: on a loaded machine (a second test run beside this one) the crawl, the server and Chromium
#: all wait for the CPU: 5 s was not enough there. A hang guard, not a speed check.
UI_WAIT = 30_000


@pytest.fixture
def browser() -> Iterator:  # type: ignore[type-arg]
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian chromium is not installed (.ci/run installs it)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield b
        b.close()


def _figure(page, name: str) -> int:  # type: ignore[no-untyped-def]
    return int(page.locator(f'[data-figure="{name}"]').first.inner_text().replace(",", ""))


def _signed_in(browser):  # type: ignore[no-untyped-def]
    """A browser context with the dashboard's credentials, at the size the layout checks use."""
    return browser.new_context(
        http_credentials={"username": AUTH[0], "password": AUTH[1]}, viewport=VIEWPORT
    )


def _console_errors(page) -> list[str]:  # type: ignore[no-untyped-def]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def test_pages_in_a_browser_over_a_running_crawl(settings, celery_worker, browser):
    shots = os.environ.get("DASHBOARD_SCREENSHOTS") or (
        str(ROOT / "docs" / "img") if os.environ.get("DOCS_SCREENSHOTS") == "1" else ""
    )
    routes = {"/broken": lambda h: h.send_body(500, b"<html>oops</html>")}
    with running_sites(["127.0.0.36", "127.0.0.37"], 70, 4, extra_routes=routes) as (_, servers):
        seeds = [s.base_url + "/" for s in servers] + [servers[1].base_url + "/broken/1"]
        # 4 req/s a host: the crawl lasts ~18 s, longer than the page's steps before Pause
        # take on a loaded machine (at 12 req/s it once ended first and the button stayed
        # disabled, as it is for a finished crawl).
        opts = {"allow_private_networks": True, "rate": 4.0, "max_retries": 0}
        crawl = start_crawl(seeds, settings=settings, **opts)
        heard: list[dict] = []
        pubsub = crawl.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(crawl.ck.events)
        with dashboard(settings.broker_url) as base:
            ctx = _signed_in(browser)
            page = ctx.new_page()
            errors = _console_errors(page)

            # The crawls page lists it, live.
            page.goto(base + "/")
            row = page.locator(f'tr[data-crawl="{crawl.id}"]')
            row.wait_for(timeout=UI_WAIT)
            assert crawl.id in row.inner_text() and "running" in row.inner_text()

            # The crawl page: its figures move while the crawl runs.
            page.goto(f"{base}/crawls/{crawl.id}")
            page.locator("#hosts tbody tr").first.wait_for(timeout=UI_WAIT)
            # The figures come with their own request, which may answer after the host table's.
            done = page.locator('[data-figure="done"]').first
            wait_until(lambda: done.inner_text().strip() != "", timeout=10)
            first = _figure(page, "done")
            wait_until(lambda: _figure(page, "done") >= first + 8, timeout=30)

            # Pause, resume: the page says so, the crawl does so.
            page.click('button[data-action="pause"]')
            page.locator("#status", has_text="paused").wait_for(timeout=UI_WAIT)
            assert crawl.store.lifecycle.read().paused
            # During the crawl (paused: once its last fetches are in, nothing moves), the
            # page's figures are status --json's.
            wait_until(lambda: crawl.progress()["in_flight"] == 0, timeout=20)
            page.wait_for_timeout(3500)  # one refresh of the page after that
            during = _status_json(settings, crawl.id)
            assert during["outstanding"] > 0, "paused mid-crawl"
            for name in ("done", "admitted", "outstanding", "queued", "failed"):
                shown = page.locator(f'#counters tr[data-key="{name}"] td').nth(1).inner_text()
                assert int(shown.replace(",", "")) == during[name], name
            page.click('button[data-action="resume"]')
            page.locator("#status", has_text="running").wait_for(timeout=UI_WAIT)

            # A forged POST (no XSRF token) from the page's own origin is refused.
            forged = page.evaluate(
                "async (u) => (await fetch(u, {method: 'POST', credentials: 'same-origin'})).status",
                f"/api/crawls/{crawl.id}/pause",
            )
            assert forged == 403 and not crawl.store.lifecycle.read().paused
            page.wait_for_timeout(200)
            # The refused request is the one console error Chromium reports here.
            assert errors and "403" in errors.pop(), errors

            crawl.wait(timeout=90)
            page.locator("#status", has_text="finished").wait_for(timeout=UI_WAIT)
            page.wait_for_timeout(2500)  # one more poll after the end
            status = _status_json(settings, crawl.id)
            for name in ("done", "admitted", "outstanding", "pages_per_s"):
                shown = page.locator(f'[data-figure="{name}"]').first.inner_text()
                assert float(shown.replace(",", "")) == status[name], name
            counters = dict(
                (r.get_attribute("data-key"), r.locator("td").nth(1).inner_text().replace(",", ""))
                for r in page.locator("#counters tr").all()
            )
            for name in ("failed", "fetched", "queued", "robots_disallowed"):
                assert int(counters[name]) == status[name], name
            # Every declared counter shows, grouped, the render ones too; help on hover.
            assert {"rendered", "robots_unreachable", "subrequests", "retrying"} <= set(counters)
            groups = page.locator("#counters table").evaluate_all(
                "ts => ts.map(t => t.dataset.group)"
            )
            assert groups[:3] == ["frontier", "pages", "not fetched"], groups
            assert (
                page.locator('#counters tr[data-key="rendered"] td')
                .first.get_attribute("title")
                .startswith("pages rendered")
            )
            # The chart has a time axis (clock times) and a rate axis.
            assert page.locator("#chart text.time").count() >= 2
            assert re.fullmatch(
                r"\d\d:\d\d:\d\d", page.locator("#chart text.time").first.text_content() or ""
            )
            # On a finished crawl only "Retry failed" applies (one URL failed).
            assert page.locator('button[data-action="pause"]').is_disabled()
            assert page.locator('button[data-action="cancel"]').is_disabled()
            assert page.locator('button[data-action="retry_failed"]').is_enabled()
            # Only live worker processes are listed.
            assert page.locator("#workers tbody tr").count() >= 1
            codes = {
                r.locator("td").nth(0).inner_text(): int(r.locator("td").nth(1).inner_text())
                for r in page.locator("#status-codes tbody tr").all()
            }
            assert codes == {k: v for k, v in crawl.summary()["status_codes"].items() if v}
            assert page.locator("#chart polyline.pages").count() == 1
            if shots:
                page.screenshot(path=str(Path(shots) / "dashboard-crawl.png"))

            # Set a host's rate, then retry the failed URL.
            host = servers[0].base_url.split("//")[1].split(":")[0]
            page.fill("#rate-host", host)
            page.fill("#rate-value", "3")
            page.click("#rate-form button[type=submit]")
            page.locator("#control-result", has_text="rate: done").wait_for(timeout=UI_WAIT)
            # This crawl's rate for the host (not the cluster-wide set-rate), in its table.
            assert crawl.client.hget(crawl.ck.host_rates, host) == b"3.0"
            assert crawl.client.hget(crawl.store.r.keys.rates, host) is None
            host_row = page.locator(f'#hosts tbody tr[data-host="{host}"]')
            heads = page.locator("#hosts thead th")
            title = "This crawl's rate (req/s)"

            def shown_rate() -> str:
                texts = heads.all_inner_texts()
                if title not in texts or not host_row.count():
                    return ""
                return host_row.locator("td").nth(texts.index(title)).inner_text()

            wait_until(lambda: shown_rate() == "3", timeout=20)
            assert status["failed"] == 1, "the seed answering 500 fails (no retries)"
            error_row = page.locator("#errors tbody tr").first
            assert re.search(r"http://127\.0\.0\.37:\d+/broken/1", error_row.inner_text())
            page.click('button[data-action="retry_failed"]')
            page.locator("#control-result", has_text="retry_failed: done").wait_for(timeout=UI_WAIT)
            crawl.wait(timeout=60)
            if shots:
                page.goto(base + "/")
                row.wait_for(timeout=UI_WAIT)
                page.screenshot(path=str(Path(shots) / "dashboard-crawls.png"))
            unauthenticated = browser.new_context().request.get(f"{base}/api/crawls")
            assert unauthenticated.status == 401
            assert errors == []
            ctx.close()
        while msg := pubsub.get_message(timeout=1.0) or pubsub.get_message(timeout=1.0):
            heard.append(json.loads(msg["data"]))
        pubsub.close()
    actions = [e["action"] for e in heard if e["event"] == "action"]
    assert actions == ["pause", "resume", "set_rate", "retry_failed"]


def test_cancel_asks_first(settings, browser):
    """Cancel is one click away from dropping a crawl's queue: the page asks first, and a
    "no" leaves the crawl running."""
    crawl = start_crawl(["http://127.0.0.39:9/"], settings=settings, allow_private_networks=True)
    with dashboard(settings.broker_url) as base:
        ctx = _signed_in(browser)
        page = ctx.new_page()
        asked: list[str] = []

        def answer(dialog):  # type: ignore[no-untyped-def]
            asked.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", answer)
        page.goto(f"{base}/crawls/{crawl.id}")
        page.locator("#status", has_text="running").wait_for(timeout=UI_WAIT)
        assert page.locator('button[data-action="resume"]').is_disabled()
        page.click('button[data-action="cancel"]')
        page.wait_for_timeout(500)
        assert asked and crawl.id in asked[0]
        assert crawl.status == "running" and page.locator("#control-result").inner_text() == ""
        ctx.close()


def test_cancel_from_the_crawl_page(settings, celery_worker, browser):
    # One request every 2 s: the crawl is still running when the page cancels it.
    with running_sites(["127.0.0.38"], 40, 3) as (_, servers):
        crawl = start_crawl(
            [servers[0].base_url + "/"], settings=settings, allow_private_networks=True, rate=0.5
        )
        with dashboard(settings.broker_url) as base:
            ctx = _signed_in(browser)
            page = ctx.new_page()
            errors = _console_errors(page)
            page.goto(f"{base}/crawls/{crawl.id}")
            page.locator("#status", has_text="running").wait_for(timeout=UI_WAIT)
            page.once("dialog", lambda dialog: dialog.accept())  # "Cancel crawl ...?"
            page.click('button[data-action="cancel"]')
            page.locator("#control-result", has_text="cancel: done").wait_for(timeout=UI_WAIT)
            summary = crawl.wait(timeout=30)
            page.locator("#status", has_text="cancelled").wait_for(timeout=UI_WAIT)
            page.locator('#actions li[data-action="cancel"]').wait_for(timeout=UI_WAIT)
            assert errors == []
            ctx.close()
    assert summary["status"] == "cancelled" and summary["counters"]["done"] < 40


def test_a_crawl_that_fetched_nothing_shows_as_failed(settings, celery_worker, browser):
    """Nothing answers at its seed: the crawl is over with nothing fetched. The page says
    failed (not a green finished), gives no pages/s for 0 pages, and its Errors card says why
    (issue 50 item 13)."""
    crawl = start_crawl(["http://127.0.0.39:9/"], settings=settings, allow_private_networks=True)
    crawl.wait(timeout=60)
    with dashboard(settings.broker_url) as base:
        ctx = _signed_in(browser)
        page = ctx.new_page()
        errors = _console_errors(page)
        page.goto(f"{base}/crawls/{crawl.id}")
        badge = page.locator("#status", has_text="failed")
        badge.wait_for(timeout=UI_WAIT)
        assert "failed" in (badge.get_attribute("class") or "")
        assert page.locator('[data-figure="pages_per_s"]').first.inner_text() == "—"
        row = page.locator("#errors tbody tr").first
        row.wait_for(timeout=UI_WAIT)
        assert row.locator("td").nth(3).inner_text().strip(), row.inner_text()
        page.goto(base + "/")
        listed = page.locator(f'tr[data-crawl="{crawl.id}"]')
        listed.wait_for(timeout=UI_WAIT)
        assert "failed" in listed.inner_text() and "finished" not in listed.inner_text()
        assert errors == []
        ctx.close()


def test_a_cancel_from_the_cli_a_rate_and_long_messages(settings, browser):
    """No worker serves the crawl, so a CLI cancel leaves it cancelling: the page says so,
    without pages/s or an ETA, and the cancel is in its Actions log. A rate set on the page
    shows in the host table with the next refresh (it lagged 3-20 s), and a long error
    message wraps inside its card (issue 50 item 13)."""
    from click.testing import CliRunner

    from crawler_tasks.surface.cli import main as cli

    seeds = [f"http://127.0.0.39:9/{i}" for i in range(20)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True)
    # A failure with a long message, as a dead letter and its counter (what a worker writes).
    pk = crawl.ck.parts[0]
    long = "connection refused " + "x" * 400
    crawl.client.hset(pk.failed, "http://127.0.0.39:9/0", json.dumps(
        {"url": "http://127.0.0.39:9/0", "error": "connection", "detail": long}
    ))  # fmt: skip
    crawl.client.hincrby(pk.stats, "failed:connection", 1)
    with dashboard(settings.broker_url) as base:
        ctx = _signed_in(browser)
        page = ctx.new_page()
        errors = _console_errors(page)
        page.goto(f"{base}/crawls/{crawl.id}")
        page.locator("#status", has_text="running").wait_for(timeout=UI_WAIT)
        result = CliRunner().invoke(cli, ["cancel", crawl.id, "--broker", settings.broker_url])
        assert result.exit_code == 0, result.output
        page.locator("#status", has_text="cancelling").wait_for(timeout=UI_WAIT)
        assert page.locator("#eta").inner_text() == "—"
        assert page.locator('[data-figure="pages_per_s"]').first.inner_text() == "—"
        logged = page.locator('#actions li[data-action="cancel"]')
        logged.wait_for(timeout=UI_WAIT)
        assert "by cli" in logged.inner_text()

        # The long message wraps: its cell ends inside the Errors card.
        message = page.locator("#errors tbody tr td.message").first
        message.wait_for(timeout=UI_WAIT)
        card = page.locator("section.card", has=page.locator("#errors"))
        cell_box, card_box = message.bounding_box(), card.bounding_box()
        assert cell_box and card_box
        assert cell_box["x"] + cell_box["width"] <= card_box["x"] + card_box["width"] + 1

        # A host's rate set on the page is in the host table by the next refresh (3 s; it
        # took 6 s or more, a snapshot kept 5 s and read every 6 s).
        page.fill("#rate-host", "127.0.0.39")
        page.fill("#rate-value", "6")
        page.click("#rate-form button[type=submit]")
        page.locator("#control-result", has_text="rate: done").wait_for(timeout=UI_WAIT)
        title = "This crawl's rate (req/s)"
        row = page.locator('#hosts tbody tr[data-host="127.0.0.39"]')

        def shown_rate() -> str:
            texts = page.locator("#hosts thead th").all_inner_texts()
            if title not in texts or not row.count():
                return ""
            return row.locator("td").nth(texts.index(title)).inner_text()

        wait_until(lambda: shown_rate() == "6", timeout=4.5)
        assert errors == []
        ctx.close()
