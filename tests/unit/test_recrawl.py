"""Periodic recrawls, their schedules file: where it is by default and how it is checked. The
runs under a real celery beat: tests/integration/test_recrawl.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler_tasks.settings import load
from crawler_tasks.state.schedules import load_file
from crawler_tasks.worker.tasks import schedules_file
from tests.support.paths import ROOT


def test_schedules_file_default_is_the_working_directorys_then_the_checkouts(tmp_path: Path):
    explicit = load(env={"CRAWLER_SCHEDULES_FILE": "/x/s.toml"})
    assert schedules_file(explicit, cwd=tmp_path) == Path("/x/s.toml")
    # Beat under the Procfile runs in the checkout (or a copy of its files): ./config/ first.
    assert schedules_file(load(env={}), cwd=tmp_path) == ROOT / "config" / "schedules.toml"
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "schedules.toml").write_text("")
    assert schedules_file(load(env={}), cwd=tmp_path) == tmp_path / "config" / "schedules.toml"


def test_schedules_file_is_validated(tmp_path: Path):
    path = tmp_path / "s.toml"
    path.write_text(
        '[[schedule]]\nname = "docs"\nseeds = ["https://e.org/"]\ncron = "0 3 * * *"\n'
        "[schedule.options]\nmax_depth = 2\n"
    )
    (item,) = load_file(path)
    assert item.options == {"max_depth": 2} and item.celery_schedule().hour == {3}
    path.write_text('[[schedule]]\nname = "x"\nseeds = ["https://e.org/"]\n')
    with pytest.raises(ValueError, match="exactly one"):
        load_file(path)
