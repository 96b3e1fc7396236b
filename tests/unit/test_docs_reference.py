"""The docs' generated reference lists every crawl option, setting, counter, CLI command and
flag, exception, Redis key and Lua script: the pages are built in-process by the functions
`make docs` runs (docs/_gen/pages.py), from the code's own declarations, and each check reads
the declaration independently of the page. (This is where "the README lists every option"
moved: the README no longer lists them.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from types import ModuleType

import click

from crawler_tasks import errors
from crawler_tasks.settings import Settings
from crawler_tasks.state.options import CrawlOptions, option_limits, user_option_names
from crawler_tasks.surface import crawl_command
from crawler_tasks.surface.cli import main
from tests.support.paths import ROOT


def _load_pages() -> ModuleType:
    path = ROOT / "docs" / "_gen" / "pages.py"
    spec = importlib.util.spec_from_file_location("docs_pages", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_pages"] = module
    spec.loader.exec_module(module)
    return module


pages = _load_pages()


def _cells(row: str) -> list[str]:
    """A table row's cells (an escaped pipe, as in ``int \\| None``, is inside a cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def _rows(page: str) -> list[str]:
    """The first cell of each table row of ``page``."""
    return [m.group(1) for m in re.finditer(r"^\| (.+?) \|", page, re.M)]


def test_every_crawl_option_with_its_default_variable_and_range() -> None:
    page = pages.options_page()
    listed = _rows(page)
    assert [n for n in user_option_names() if f"`{n}`" not in listed] == []
    for f in dataclasses.fields(CrawlOptions):
        if f.name not in user_option_names():
            continue
        row = next(line for line in page.splitlines() if line.startswith(f"| `{f.name}` |"))
        setting = f.metadata.get("setting")
        if setting:  # the CRAWLER_* variable its default comes from
            assert f"CRAWLER_{setting.upper()}" in row, f.name
        if f.name in option_limits():
            assert " to " in _cells(row)[4], f"{f.name}: no range"
        assert _cells(row)[5], f"{f.name}: no description (a #: comment, or its setting's)"


def test_every_setting_with_its_variable_default_and_doc() -> None:
    page = pages.settings_page()
    listed = _rows(page)
    for f in dataclasses.fields(Settings):
        assert f"`{f.name}`" in listed, f.name
        row = next(line for line in page.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert f"`CRAWLER_{f.name.upper()}`" in row
        assert _cells(row)[5], f"{f.name}: no description (a #: comment)"
        if "limits" in f.metadata:
            assert " to " in _cells(row)[4], f"{f.name}: no range"


def test_every_counter_and_family() -> None:
    page = pages.counters_page()
    listed = _rows(page)
    counter = pages.counter_enum()
    assert len(counter) > 20
    assert [c.value for c in counter if f"`{c.value}`" not in listed] == []
    for family in ("status", "failed", "skipped", "change", "links_dropped"):
        assert f"`{family}:<name>`" in listed


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((f"{prefix}{name}", cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, f"{prefix}{name} ")
    return out


def test_every_cli_command_and_crawl_flag() -> None:
    page = pages.cli_page()
    commands = _commands(main)
    assert {"crawl", "status", "schedule add", "export"} <= {n for n, _ in commands}
    for name, cmd in commands:
        assert f"[`crawler {name}`]" in page, name
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert f"`{'/'.join(p.opts)}`" in page, (name, p.opts)
    # Every crawl option a named flag of `crawler crawl` sets is one of the crawl's options.
    flags = [p for p in crawl_command.crawl.params if p.name not in crawl_command._NOT_OPTIONS]
    assert flags and all(f"`{p.opts[0]}" in page for p in flags)


def test_the_cli_details_render_every_command() -> None:
    """mkdocs-click (the page's ``::: mkdocs-click`` block) finds the group and documents each
    command: a moved module or a renamed group fails here, not only in `make docs`."""
    import markdown  # mkdocs-click's dependency (the test extra installs it)

    page = pages.cli_page()
    html = markdown.Markdown(extensions=["mkdocs-click", "tables", "attr_list"]).convert(page)
    for name, _ in _commands(main):
        assert f"crawler {name}" in html, name
    assert "--max-depth" in html.split("Details", 1)[1]


def test_every_exception_in_the_tree() -> None:
    page = pages.errors_page()
    listed = " ".join(_rows(page))
    for cls in pages.error_classes():
        assert f"`{cls.__name__}`" in listed, cls.__name__
    assert len(pages.error_classes()) == len(
        [
            c
            for c in vars(errors).values()
            if isinstance(c, type) and c.__module__ == errors.__name__
        ]
    )


def test_every_key_and_lua_script() -> None:
    keys_page = pages.redis_keys_page()
    rows = pages.key_rows()
    assert len(rows) > 30 and all(what for _, _, what in rows)
    assert "P:{C}:config" in keys_page and "P:workers" in keys_page
    lua_page = pages.lua_page()
    scripts = list((ROOT / "crawler_tasks").rglob("*.lua"))
    assert len(scripts) > 20
    for path in scripts:
        assert f"\n## {path.stem}\n" in lua_page, path.name
        assert pages.lua_header(path), f"{path.name}: no header comment"


def test_the_install_page_names_every_extra() -> None:
    """Every optional-dependency group of pyproject.toml has a row on the install page."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli the package depends on there
        import tomli as tomllib  # type: ignore[no-redef]

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]
    page = (ROOT / "docs" / "getting-started" / "install.md").read_text("utf-8")
    assert [name for name in extras if f"`{name}`" not in page] == []


def test_every_module_with_its_docstring() -> None:
    page = pages.modules_page()
    modules = list((ROOT / "crawler_tasks").rglob("*.py"))
    assert len(modules) > 100
    listed = _rows(page)
    for path in modules:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        assert f"`{'.'.join(parts)}`" in listed, path


def test_every_crawl_status_with_its_meaning() -> None:
    page = pages.counters_page()
    status = pages._first("Status", "crawler_tasks.state.formats")
    section = page.split("## Crawl statuses", 1)[1]
    for member in status:
        row = next(
            line for line in section.splitlines() if line.startswith(f"| `{member.value}` |")
        )
        assert _cells(row)[2], f"{member.value}: no comment where it is declared"
