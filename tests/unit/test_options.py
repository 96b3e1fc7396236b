"""One name and one default per crawl option: a crawl default is declared once (its
``Settings`` field; the option only names it), and ``crawler crawl --option`` takes every option.
Table-driven over the declarations, so an option added later is covered without a new row."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from crawler_tasks.errors import ConfigError
from crawler_tasks.settings import Settings, load
from crawler_tasks.state.options import CrawlOptions, user_option_names
from crawler_tasks.surface import crawl_command

SEED = "http://a.example/"
LINKED = [f for f in dataclasses.fields(CrawlOptions) if "setting" in f.metadata]
SETTING_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}


def _other(value: Any) -> Any:
    """A value of ``value``'s type that differs from it."""
    if value == SETTING_DEFAULTS["render_block"]:
        return "script"  # a list of Playwright's resource types
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2  # stays in range: rates, seconds, a false-positive rate
    return f"{value}-probe"


def _env_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value).strip("'")


def test_the_crawl_defaults_are_linked() -> None:
    assert len(LINKED) >= 22  # the crawl defaults of today; more may come
    assert {f.metadata["setting"] for f in LINKED} <= set(SETTING_DEFAULTS)


@pytest.mark.parametrize("option", LINKED, ids=[f.name for f in LINKED])
def test_a_crawl_default_comes_from_its_one_setting(option: dataclasses.Field[Any]) -> None:
    name, setting = option.name, option.metadata["setting"]
    base = CrawlOptions.from_user(load(env={}), seeds=(SEED,))
    assert getattr(base, name) == SETTING_DEFAULTS[setting]
    value = _other(SETTING_DEFAULTS[setting])
    env = {f"CRAWLER_{setting.upper()}": _env_text(value)}
    changed = CrawlOptions.from_user(load(env=env), seeds=(SEED,))
    assert getattr(changed, name) == value
    # Nothing else follows that variable: no second copy of the default anywhere.
    assert dataclasses.replace(changed, **{name: getattr(base, name)}) == base


def test_every_setting_marked_crawl_default_is_an_options_default() -> None:
    """The "Crawl default" comments of settings.py name exactly the settings options use."""
    source = (Path(crawl_command.__file__).parent.parent / "settings.py").read_text("utf-8")
    lines = source.splitlines()
    marked = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = []
            for line in reversed(lines[: node.lineno - 1]):
                if not line.strip().startswith("#:"):
                    break
                above.append(line)
            if any("Crawl default" in line for line in above):
                marked.add(node.target.id)
    assert marked == {f.metadata["setting"] for f in LINKED}


#: The public defaults of options built without settings (``CrawlOptions(...)``).
UNSET_DEFAULTS = {
    "max_pages_per_host": 0,
    "rate": 1.0,
    "burst": 1,
    "concurrency": 1,
    "user_agent": "",
    "robots_agent": "",
    "domain_key": "host",
    "bloom_capacity": 0,
    "bloom_error_rate": 0.001,
    "bloom_shard_bits": 1 << 26,
    "partitions": 0,
    "max_url_length": 2048,
    "max_repeated_segments": 3,
    "max_retries": 3,
    "retry_backoff": 2.0,
    "retry_backoff_max": 60.0,
    "max_host_outage": 120.0,
    "max_links_per_page": 5000,
    "honour_nofollow": True,
    "max_body_bytes": 10 * 1024 * 1024,
    "max_redirects": 10,
    "warc_non_html": True,
}


def test_options_built_without_settings_keep_their_defaults() -> None:
    opts = CrawlOptions("c", (SEED,))
    assert {name: getattr(opts, name) for name in UNSET_DEFAULTS} == UNSET_DEFAULTS
    assert CrawlOptions.from_user(None, seeds=(SEED,)) == dataclasses.replace(opts, crawl_id="-")


#: Values of options whose type alone does not make a valid one.
SAMPLES: dict[str, Any] = {
    "priority": "low",
    "order": "dfs",
    "extract": "myproject.extract:article",
    "proxy": "http://127.0.0.1:3128",
    "domain_key": "registered_domain",
    "rates": {"a.example": 2.0},
    "headers": {"X-Probe": "1"},
    "cookies": {"a.example": {"session": "env:SESSION"}},
    "auth": {"a.example": "env:A_AUTH"},
    "bloom_error_rate": 0.01,
    "bloom_shard_bits": 1 << 14,
    "max_url_length": 200,
    "allowed_domains": ["a.example"],
    "render": "auto",
    "render_hosts": {"a.example": "always"},
    "render_block": "image,script",
    "max_interval": 7200.0,  # not below min_interval's default
    "min_interval": 600.0,
}


def _sample(f: dataclasses.Field[Any]) -> Any:
    if f.name in SAMPLES:
        return SAMPLES[f.name]
    kind = str(f.type).split("|")[0].split("[")[0].strip()
    default = f.default if f.default is not dataclasses.MISSING else None
    return {"int": 2, "float": 0.5, "bool": not default, "str": "probe", "tuple": ["probe"]}[kind]


def _expected(name: str, value: Any) -> Any:
    if name in ("output", "frontier_store"):  # places, fixed absolute when planned
        return str(Path(value).resolve())
    return tuple(value) if isinstance(value, list) else value


@pytest.mark.parametrize("name", user_option_names())
def test_crawl_option_flag_takes_every_option(name: str) -> None:
    field = next(f for f in dataclasses.fields(CrawlOptions) if f.name == name)
    value = _sample(field)
    assert value != field.default, "the sample must differ from the default"
    args = [SEED, "--option", f"{name}={json.dumps(value)}"]
    ctx = crawl_command.crawl.make_context("crawl", args)
    opts = crawl_command.crawl_options(ctx, load(env={}))
    assert getattr(opts, name) == _expected(name, value)


def test_crawl_option_and_named_flags_make_one_crawl() -> None:
    args = [SEED, "--max-depth", "2", "--option", "max_retries=7", "--option", "priority=low"]
    opts = crawl_command.crawl_options(
        crawl_command.crawl.make_context("crawl", args), load(env={})
    )
    assert (opts.max_depth, opts.max_retries, opts.priority) == (2, 7, "low")
    # --option overrides a named flag's default (not given on the command line).
    args = [SEED, "--option", "max_pages=9", "--option", "allow_private_networks=true"]
    opts = crawl_command.crawl_options(
        crawl_command.crawl.make_context("crawl", args), load(env={})
    )
    assert opts.max_pages == 9 and opts.allow_private_networks


#: A value of another type than each kind of field takes.
WRONG = {"int": "x", "float": "x", "bool": "x", "str": 5, "tuple": 5, "dict": 5}


@pytest.mark.parametrize("name", user_option_names())
def test_a_value_of_the_wrong_type_is_refused_by_name(name: str) -> None:
    field = next(f for f in dataclasses.fields(CrawlOptions) if f.name == name)
    value = WRONG[str(field.type).split("|")[0].split("[")[0].strip()]
    with pytest.raises(ConfigError, match=name):
        CrawlOptions.from_user(load(env={}), seeds=(SEED,), **{name: value})


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("timeout", 0, "timeout must be between 0.01 and 300"),
        ("timeout", 301.0, "timeout must be between 0.01 and 300"),
        ("render_deadline", -1.0, "render_deadline must be between 0.1 and 300"),
        ("render_max_subrequests", -1, "render_max_subrequests must be between 0 and"),
        ("render_block", "images", "unknown resource types ['images']"),
    ],
)
def test_request_and_render_limits_are_checked_when_the_crawl_is_made(
    name: str, value: Any, why: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)):
        CrawlOptions.from_user(load(env={}), seeds=(SEED,), **{name: value})


def test_the_reaper_waits_for_the_crawls_own_timeout() -> None:
    from crawler_tasks.state.option_checks import reap_after

    quick = CrawlOptions.from_user(load(env={}), seeds=(SEED,), timeout=5.0)
    slow = dataclasses.replace(quick, timeout=200.0)
    rendered = dataclasses.replace(quick, render="always", render_deadline=20.0)
    assert reap_after(600, quick) == 605 and reap_after(600, slow) == 800
    assert reap_after(600, rendered) == 625
    # ... and it is the deadline every request of the crawl gets (web/profile.py).
    from crawler_tasks.web.profile import RequestProfile

    assert RequestProfile.build(quick, "ua").fetch_args()["timeout"] == 5.0


def test_every_number_has_a_range():
    """A numeric setting or crawl option without a declared range is how `--max-pages 1e20`
    and `set-rate HOST 1e400` got through: each one declares its floor and ceiling."""
    from crawler_tasks.settings import LIMITS
    from crawler_tasks.state.options import option_limits

    numeric = {"int", "float"}
    for f in dataclasses.fields(Settings):
        if str(f.type).split(" ")[0] in numeric:
            assert f.name in LIMITS, f.name
    for f in dataclasses.fields(CrawlOptions):
        kind = str(f.type).split("|")[0].strip()
        if kind in numeric and f.name != "started_at":
            assert f.name in option_limits(), f.name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_pages": 99999999999999999999}, "max_pages must be between 0 and 1,000,000,000"),
        ({"rate": "1e400"}, "rate must be a number up to its limit"),
        ({"rates": {"a.example": "1e400"}}, "rate for 'a.example'"),
        ({"rates": {"a.example": -5}}, "rate for 'a.example' must be between 0.001"),
        ({"rate": float("nan")}, "not nan"),
        ({"burst": 10**6}, "burst must be between 0 and 1,000"),
        ({"max_depth": 10**9}, "max_depth must be between 0 and 100,000"),
        ({"retry_backoff_max": float("inf")}, "retry_backoff_max must be between"),
    ],
)
def test_numbers_past_their_range_are_refused(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        CrawlOptions.from_user(load(env={}), seeds=(SEED,), **values)
    assert CrawlOptions.from_user(None, seeds=(SEED,), rate="inf").rate == float("inf")


def test_settings_past_their_range_are_refused():
    for name, raw in [("DEFAULT_RATE", "1e400"), ("CONNECT_TIMEOUT", "0"), ("FETCH_BATCH", "0")]:
        with pytest.raises(ValueError, match=f"CRAWLER_{name}="):
            load(env={f"CRAWLER_{name}": raw})
