"""Every shell and Python block of the docs' tutorial (the Getting started pages) runs, in
order, as written, in an empty directory: the commands a newcomer copies are the ones CI runs.

A block that must not run says so on the line before it, with why:
``<!-- test: skip (why) -->`` (the internet, a cluster of one's own, a package install),
``<!-- test: listing (why) -->`` (a file of the checkout shown in the page, run by another
block), or ``<!-- test: provided (why) -->`` (a Redis and workers: the test starts its own,
a private redis-server on a free port and local worker processes, and sets
``CRAWLER_BROKER_URL`` for the blocks after it, as the block tells the reader to)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawler_tasks.surface.embedded import local_workers, private_redis
from tests.support.paths import ROOT

TUTORIAL = ROOT / "docs" / "getting-started"
PAGES = ("install.md", "first-crawl.md", "first-project.md")
MARKS = ("skip", "listing", "provided")

_BLOCK = re.compile(
    r"(?:<!-- test: (?P<mark>\w+) \((?P<why>[^)]*)\) -->\n)?```(?P<lang>sh|python)\n(?P<code>.*?)```",
    re.S,
)


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    code: str
    mark: str | None
    why: str


def blocks(page: str) -> list[Block]:
    text = (TUTORIAL / page).read_text("utf-8")
    return [
        Block(page, m["lang"], m["code"], m["mark"], " ".join((m["why"] or "").split()))
        for m in _BLOCK.finditer(text)
    ]


def test_every_block_runs_or_says_why_not() -> None:
    """The marks are known ones with a reason, and most of the tutorial runs (a page whose
    blocks were all marked would make the test below vacuous)."""
    every = [b for page in PAGES for b in blocks(page)]
    assert len(every) >= 10
    assert [b for b in every if b.mark is not None and (b.mark not in MARKS or not b.why)] == []
    runs = [b for b in every if b.mark is None]
    assert len(runs) >= 6, runs
    assert {b.page for b in runs} == {"first-crawl.md", "first-project.md"}
    # What the test provides is what the page tells the reader to start.
    provided = [b for b in every if b.mark == "provided"]
    assert provided and all(
        "redis-server" in b.code and "CRAWLER_BROKER_URL" in b.code and "celery" in b.code
        for b in provided
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """An empty directory, with the checkout's ``examples/`` (the first project's blocks run
    ``python examples/products/run.py`` from a checkout)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    yield tmp_path


def _run(block: Block, cwd: Path, env: dict[str, str]) -> None:
    if block.lang == "sh":
        argv = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        script = cwd / "block.py"
        script.write_text(block.code, "utf-8")
        argv = [sys.executable, str(script)]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, (
        f"{block.page}: this block failed (exit {result.returncode}):\n{block.code}\n"
        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", PAGES)
def test_tutorial_page_runs_as_written(page: str, workdir: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],  # `crawler`, `python` of this venv
        "CRAWLER_OUTPUT_DIR": str(workdir / "data"),
    }
    env.pop("CRAWLER_BROKER_URL", None)
    env.pop("CRAWLER_REDIS_URL", None)
    with ExitStack() as stack:
        for block in blocks(page):
            if block.mark == "provided":
                broker = stack.enter_context(private_redis())
                stack.enter_context(
                    local_workers(broker, broker, fetch_threads=8, fetchers=1, extra_env=env)
                )
                env["CRAWLER_BROKER_URL"] = broker
            elif block.mark is None:
                _run(block, workdir, env)
