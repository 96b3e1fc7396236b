"""Processes started by `crawler crawl --embedded` never outlive the command even when it is
killed with SIGKILL, when no cleanup code of it runs. After a normal finish and a SIGTERM:
tests/integration/test_embedded_lifetime.py."""

from __future__ import annotations

import secrets
import signal

from tests.support.embedded_command import (
    alive,
    crawl_started,
    embedded_crawl,
    marked,
    redis_children,
)
from tests.support.sitegen import running_sites
from tests.support.waiting import wait_until


def test_nothing_survives_a_sigkill_of_the_command(tmp_path):
    mark = secrets.token_hex(8)
    with running_sites(["127.0.0.51"], 200, 3) as (_, servers):
        proc = embedded_crawl(servers[0].base_url + "/", "127.0.0.51", "5", tmp_path, mark)
        try:
            # The command, two fetch workers, the parse worker and its pool process.
            wait_until(lambda: len(marked(mark)) >= 5, timeout=60)
            redis_pids = wait_until(lambda: redis_children(proc.pid), timeout=30)
            wait_until(lambda: "started" in crawl_started(tmp_path), timeout=60)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        wait_until(lambda: not marked(mark), timeout=30)
        assert not any(alive(p) for p in redis_pids)
