"""config/alerts.yml and config/grafana-dashboard.json against the real exporter: promtool
accepts the rules and their unit tests pass (and fail when a rule is broken), and every metric
the rules and the dashboard's queries name is one `crawler metrics` really exports (scraped
from a running exporter over a real crawl)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from crawler_tasks import start_crawl
from crawler_tasks.surface.embedded import free_port, stop_process
from tests.support.paths import ROOT
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until

CONFIG = ROOT / "config"
_METRIC = re.compile(r"\bcrawler_[a-z_]+\b")


def _promtool(*args: str, cwd: Path = CONFIG) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed (Debian: prometheus; .ci/run installs it)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)


def test_promtool_accepts_the_rules_and_their_unit_tests_pass():
    checked = _promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked.stderr
    tested = _promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in _rules()["groups"] for r in g["rules"]}
    tested_names = {t["alertname"] for case in _tests()["tests"] for t in case["alert_rule_test"]}
    assert alerts == tested_names  # every rule has a unit test


def test_the_unit_tests_catch_a_broken_rule(tmp_path):
    # The stall window widened from 10 to 20 minutes: the stall test must fail.
    text = (CONFIG / "alerts.yml").read_text().replace("[10m]", "[20m]")
    (tmp_path / "alerts.yml").write_text(text)
    shutil.copy(CONFIG / "alerts_test.yml", tmp_path)
    broken = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert broken.returncode != 0 and "CrawlStalled" in broken.stdout + broken.stderr


def _rules() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((CONFIG / "alerts.yml").read_text())


def _tests() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((CONFIG / "alerts_test.yml").read_text())


def _dashboard_exprs() -> list[str]:
    doc = json.loads((CONFIG / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    return exprs


def test_every_metric_named_is_exported(settings, client, celery_worker):
    saved = (
        client.config_get("maxmemory")["maxmemory"],
        client.config_get("maxmemory-policy")["maxmemory-policy"],
    )
    client.config_set("maxmemory", str(2**31))  # the memory gauges need a limit (noeviction)
    client.config_set("maxmemory-policy", "noeviction")
    port = free_port()
    try:
        routes = {"/broken": lambda h: h.send_body(500, b"oops")}
        with running_sites(["127.0.0.39"], 6, 2, extra_routes=routes) as (_, servers):
            crawl = start_crawl(
                [servers[0].base_url + "/", servers[0].base_url + "/broken/1"],
                settings=settings,
                allow_private_networks=True,
                rate=50.0,
                max_retries=0,  # the 500 fails at once: crawler_failures_total has a sample
            )
            crawl.wait(timeout=60)
        proc = subprocess.Popen(
            [sys.executable, "-m", "crawler_tasks.surface.cli", "metrics", "--port", str(port)]
            + ["--broker", settings.broker_url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            text = wait_until(lambda: _scrape(f"http://127.0.0.1:{port}/metrics"), timeout=20)
        finally:
            stop_process(proc)
    finally:
        client.config_set("maxmemory", saved[0])
        client.config_set("maxmemory-policy", saved[1])
    exported = _exported(text)
    named = {m for e in _dashboard_exprs() for m in _METRIC.findall(e)}
    named |= {m for g in _rules()["groups"] for r in g["rules"] for m in _METRIC.findall(r["expr"])}
    named |= {
        _METRIC.findall(s["series"])[0] for case in _tests()["tests"] for s in case["input_series"]
    }
    assert len(named) >= 15
    assert named - exported == set(), f"named but not exported: {sorted(named - exported)}"
    assert "crawler_workers_alive 1.0" in text
    assert f'crawler_paused{{crawl="{crawl.id}"}} 0.0' in text


def _exported(text: str) -> set[str]:
    """Metric names of an exposition: those with samples, and the families declared without
    any now (a crawl with no failures, a finished crawl's hosts) under the name their
    samples take (a counter's ``_total``)."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            names.add(name + "_total" if kind == "counter" else name)
    return names


def _scrape(url: str) -> str | None:
    try:
        r = requests.get(url, timeout=2)
        return r.text if r.ok and "crawler_done_total" in r.text else None
    except requests.RequestException:
        return None
