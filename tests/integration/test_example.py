"""`make example` as the README gives it: examples/products crawls the sample site with a
Scrapy-style hook run in every worker and stores its items through the user's on_item task."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def test_make_example_extracts_the_sample_sites_products(tmp_path: Path):
    # What `make example` runs, from a scratch directory (it writes ./data/products.db).
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "products" / "run.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    with sqlite3.connect(tmp_path / "data" / "products.db") as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM products")}
    # Every page with an <h1> but /private/ (robots.txt): the hook's selectors found them.
    assert {"Sample site", "Install", "API reference", "Second post"} <= names
    assert "Secret" not in " ".join(names)
