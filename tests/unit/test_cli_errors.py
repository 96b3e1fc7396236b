"""A seeds file's mistakes caught as it is read: inline comments and fragments dropped, a
directory refused. The `crawler` command's mistakes (issue 9's table), with a real Redis and
workers: tests/integration/test_cli_errors.py."""

from __future__ import annotations

import pytest

from crawler_tasks.errors import InvalidSeed
from crawler_tasks.surface.seeds import SeedsFile


def test_inline_comments_and_directories_in_seeds_files(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# mine\nhttp://a.example/7.html   # the seventh\nhttp://a.example/#top\n")
    found = SeedsFile(str(seeds)).check(allow_private=False)
    assert found == ["http://a.example/7.html", "http://a.example/"]
    with pytest.raises(InvalidSeed, match="a directory, not a seeds file"):
        SeedsFile(str(tmp_path))
