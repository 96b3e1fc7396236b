"""A user's ``on_finished`` task, as a worker started with ``--include crawl_hooks`` (and this
directory on PYTHONPATH) registers it: it appends ``(crawl_id, summary)`` as one JSON line to
the file named by ``TEST_HOOK_FILE``."""

from __future__ import annotations

import json
import os
from typing import Any

from crawler_tasks import app


@app.task(name="crawl_hooks.notify")
def notify(crawl_id: str, summary: dict[str, Any]) -> None:
    with open(os.environ["TEST_HOOK_FILE"], "a") as f:
        f.write(json.dumps({"crawl_id": crawl_id, "summary": summary}) + "\n")
