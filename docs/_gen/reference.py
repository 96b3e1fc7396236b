"""mkdocs-gen-files script: writes the generated reference pages (docs/_gen/pages.py) into the
site at build time. Nothing generated is committed: the pages are rebuilt from the code's
declarations on every `make docs`."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
import pages  # noqa: E402  (this script's neighbour, not a package)

for path, text in pages.all_pages().items():
    with mkdocs_gen_files.open(path, "w") as out:
        out.write(text)
    mkdocs_gen_files.set_edit_path(path, "docs/_gen/pages.py")
