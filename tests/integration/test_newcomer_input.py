"""What a new user typed carelessly (issue 50's newcomer list): refused in one line, exit 2,
with nothing written before the check, or said plainly where it went through."""

from __future__ import annotations

import redis

from tests.support import cli_process

SEED = "http://a.example/"


def run(*args: str):  # type: ignore[no-untyped-def]
    return cli_process.run(*args, timeout=60)


def _one_line_exit_2(result, words: str) -> None:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_a_schedule_of_an_existing_name_is_replaced_only_when_asked(redis_url):
    client = redis.Redis.from_url(redis_url)
    add = ("schedule", "add", "nightly", SEED, "--broker", redis_url)
    assert run(*add, "--every-hours", "24").returncode == 0
    stored = client.hget("crawler:schedules", "nightly")
    _one_line_exit_2(run(*add, "--every-hours", "2"), "schedule 'nightly' exists (--replace")
    assert client.hget("crawler:schedules", "nightly") == stored
    replaced = run(*add, "--every-hours", "2", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert b'"every_hours": 2.0' in client.hget("crawler:schedules", "nightly")
