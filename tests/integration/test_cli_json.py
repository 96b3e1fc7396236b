"""``--json`` is honoured everywhere (issue 34): every ``crawler`` command that prints a result
prints it as one JSON value on stdout with ``--json`` (``watch``: one object a line), and a
mistake stays one line on stderr with exit 2. The real command in a subprocess, a real Redis,
a real worker."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from crawler_tasks import start_crawl
from tests.integration.test_cli_errors import run
from tests.support.sitegen import SiteServer

# Tests of 20-70 s: handed out first under `pytest -n N` (tests/support/scheduling.py).
pytestmark = pytest.mark.slow


def strict(text: str) -> Any:
    """JSON as a strict parser reads it: Python's json.loads takes the bare words Infinity
    and NaN (which json.dumps writes for an unlimited rate); JavaScript's JSON.parse, jq and
    most other readers refuse them."""

    def refuse(word: str) -> Any:
        raise AssertionError(f"not JSON: {word} in {text[:200]!r}")

    return json.loads(text, parse_constant=refuse)


def as_json(*args: str) -> Any:
    """The command's stdout, which must be exactly one JSON value."""
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return strict(result.stdout)


def test_steering_commands_print_one_object_and_mistakes_stay_one_line(redis_url, settings):  # type: ignore[no-untyped-def]
    crawl = start_crawl(["http://a.example/"], settings=settings)  # no worker serves it
    for action in ("pause", "resume", "cancel"):
        result = run(action, crawl.id, "--broker", redis_url, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {
            "crawl_id": crawl.id,
            "action": action,
            "no_worker": True,
        }
        assert "no worker serves this crawl" in result.stderr
    for args in (("cancel", "nope"), ("forget", "nope"), ("set-rate", "127.0.0.9", "-5")):
        result = run(*args, "--broker", redis_url, "--json")
        assert result.returncode == 2 and result.stdout == "", result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    forgotten = as_json("forget", crawl.id, "--broker", redis_url)
    assert forgotten["crawl_id"] == crawl.id and forgotten["forgotten"] is True
    assert forgotten["keys_deleted"] > 0


def test_host_settings_print_one_object(redis_url) -> None:  # type: ignore[no-untyped-def]
    host = "127.0.0.9"
    assert as_json("set-rate", host, "0.5", "--broker", redis_url) == {
        "host": host,
        "rate": 0.5,
        "scope": "cluster",
    }
    assert as_json("set-rate", host, "inf", "--broker", redis_url)["rate"] == "inf"
    assert as_json("set-rate", host, "default", "--broker", redis_url)["rate"] is None
    assert as_json("set-ceiling", host, "4", "--broker", redis_url) == {"host": host, "ceiling": 4}
    assert as_json("set-ceiling", host, "default", "--broker", redis_url)["ceiling"] is None


def test_schedules_as_json(redis_url, settings) -> None:  # type: ignore[no-untyped-def]
    seeds = ["http://a.example/", "http://b.example/"]
    added = as_json(
        "schedule", "add", "nightly", *seeds, "--every-hours", "24",
        "--option", "max_depth=2", "--broker", redis_url,
    )  # fmt: skip
    assert added["added"] is True and added["seeds"] == seeds
    assert added["options"] == {"max_depth": 2} and added["every_hours"] == 24
    assert as_json("schedule", "list", "--broker", redis_url)[0]["last_run"] is None
    run_ = start_crawl(seeds, settings=settings, schedule="nightly")
    (listed,) = as_json("schedule", "list", "--broker", redis_url)
    assert listed["name"] == "nightly" and listed["period"] == "every 24.0h"
    assert listed["runs"] == [run_.id] and listed["cron"] is None
    assert listed["last_run"] == {
        "crawl_id": run_.id,
        "revisits": 0,
        "changed_share": None,
        "not_due": 0,
        "revisit_records": 0,
        "revisit_bytes_saved": 0,
    }
    text = run("schedule", "list", "--broker", redis_url).stdout
    assert text.startswith(f"nightly\tevery 24.0h\t{' '.join(seeds)}\truns: {run_.id}\n")
    assert f"  last run {run_.id}: revisits=0 changed=- not_due=0" in text
    removed = as_json("schedule", "remove", "nightly", "--broker", redis_url)
    assert removed == {"name": "nightly", "removed": True}
    assert as_json("schedule", "list", "--broker", redis_url) == []
    result = run("schedule", "remove", "nightly", "--broker", redis_url, "--json")
    assert result.returncode == 2 and result.stdout == "" and "no schedule" in result.stderr


def test_a_crawls_results_as_json(redis_url, settings, celery_worker, tmp_path: Path):  # type: ignore[no-untyped-def]
    """failed (one array), retry-failed, watch (JSON lines, the final status last), status,
    list and export, on a crawl whose seed answers 500 (a failure, recorded)."""
    routes = {"/": lambda h: h.send_body(500, b"<html><body>broken</body></html>")}
    with SiteServer(address="127.0.0.197", extra_routes=routes) as site:
        seed = site.base_url + "/"
        opts = {"allow_private_networks": True, "max_retries": 0, "rate": math.inf}
        crawl = start_crawl([seed], settings=settings, **opts)
        crawl.wait(timeout=60)
        _results(crawl, seed, redis_url, tmp_path)


def _results(crawl, seed: str, redis_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (dead,) = as_json("failed", crawl.id, "--broker", redis_url)
    assert dead["url"] == seed
    lines = run("failed", crawl.id, "--broker", redis_url).stdout.splitlines()
    assert [strict(line) for line in lines] == [dead], "without --json: JSON lines"
    watched = run("watch", crawl.id, "--broker", redis_url, "--json").stdout.splitlines()
    assert [strict(line) for line in watched][-1]["status"] == "finished"
    assert as_json("status", crawl.id, "--broker", redis_url)["failed"] == 1
    assert crawl.id in [c["crawl_id"] for c in as_json("list", "--broker", redis_url)]
    target = tmp_path / "pages.jsonl"
    exported = as_json("export", crawl.id, "--pages", "-o", str(target), "--broker", redis_url)
    assert exported["count"] == 1 and exported["path"] == str(target) and target.exists()
    assert exported["what"] == "pages" and exported["crawl_id"] == crawl.id
    assert as_json("retry-failed", crawl.id, "--broker", redis_url) == {
        "crawl_id": crawl.id,
        "requeued": 1,
    }
    assert crawl.wait(timeout=60)["status"] == "finished"
