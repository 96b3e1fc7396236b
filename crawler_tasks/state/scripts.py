"""The Lua scripts in ``lua/``, registered once per Redis client.

Each multi-step change of crawl state is one script so that it is atomic across every worker
of the cluster; the comments in each ``.lua`` file say what it guarantees.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import redis
from redis.commands.core import Script
from redis.exceptions import (
    NoScriptError,
    OutOfMemoryError,
    RedisClusterException,
    ResponseError,
)

# Scripts that use the Bloom helpers get ``bloom_lib.lua`` prepended (EVAL cannot import).
_WITH_BLOOM = {"admit", "bloom_add"}
# Scripts that place entries in a domain's head or tail get ``tails_lib.lua`` prepended.
_WITH_TAILS = {"admit", "release"}
# Scripts that take a slot of a host's send gate get ``gate_lib.lua`` prepended.
_WITH_GATE = {"start", "gate", "subrequest"}


@cache
def source(name: str) -> str:
    text = resources.files("crawler_tasks.state").joinpath(f"lua/{name}.lua").read_text("utf-8")
    if name in _WITH_BLOOM:
        text = source("bloom_lib") + "\n" + text
    if name in _WITH_TAILS:
        text = source("tails_lib") + "\n" + text
    if name in _WITH_GATE:
        text = source("gate_lib") + "\n" + text
    return text


class Scripts:
    """Registered scripts for one client: ``scripts.admit(keys=[...], args=[...])``."""

    def __init__(self, client: redis.Redis) -> None:
        self.admit = client.register_script(source("admit"))
        self.bloom_add = client.register_script(source("bloom_add"))
        self.release = client.register_script(source("release"))
        self.cancel = client.register_script(source("cancel"))
        self.flush = client.register_script(source("flush"))
        self.refill = client.register_script(source("refill"))
        self.done = client.register_script(source("done"))
        self.finish = client.register_script(source("finish"))
        self.finishing = client.register_script(source("finishing"))
        self.requeue = client.register_script(source("requeue"))
        self.start = client.register_script(source("start"))
        self.reclaim = client.register_script(source("reclaim"))
        self.drain = client.register_script(source("drain"))
        self.claim = client.register_script(source("claim"))
        self.commit = client.register_script(source("commit"))
        self.archive_reserve = client.register_script(source("archive_reserve"))
        self.archive_commit = client.register_script(source("archive_commit"))
        self.ceiling = client.register_script(source("ceiling"))
        self.ceiling_gate = client.register_script(source("ceiling_gate"))
        self.reserve = client.register_script(source("reserve"))
        self.sample = client.register_script(source("sample"))
        self.action = client.register_script(source("action"))
        self.subrequest = client.register_script(source("subrequest"))
        self.gate = client.register_script(source("gate"))
        self.render_plan = client.register_script(source("render_plan"))
        self.address = client.register_script(source("address"))


class Call(NamedTuple):
    """One script call, to be sent with others (:func:`run_together`)."""

    script: Script
    keys: list[str]
    args: list[Any]

    def run(self, client: redis.Redis) -> Any:
        """This call alone (a script Redis does not hold is loaded)."""
        return self.script(keys=self.keys, args=self.args, client=client)


def run_together(client: redis.Redis, calls: list[Call]) -> list[Any]:
    """Several script calls in one round trip, run in this order (not atomically: as if sent
    one after another); their replies. The first error raises (:func:`run_each` keeps them)."""
    replies = run_each(client, calls)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def run_each(client: redis.Redis, calls: list[Call]) -> list[Any]:
    """:func:`run_together`, each call's error in its reply's place (a caller that must know
    which calls ran). redis-py's pipeline would first ask SCRIPT EXISTS (a round trip of its
    own), so EVALSHA is queued as is, and a script Redis does not hold (restarted, flushed) is
    run again alone, which loads it. A failed connection raises."""
    pipe = client.pipeline(transaction=False)
    try:
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
    except RedisClusterException:  # a cluster's pipelines refuse EVALSHA: one call each
        return [_one(call, client) for call in calls]
    replies = list(pipe.execute(raise_on_error=False))
    for i, (call, reply) in enumerate(zip(calls, replies, strict=True)):
        if isinstance(reply, NoScriptError):
            replies[i] = _one(call, client)
    return replies


def _one(call: Call, client: redis.Redis) -> Any:
    """One call alone; a reply error (not a connection's) in its reply's place."""
    try:
        return call.run(client)
    except ResponseError as exc:
        return exc


class Carried:
    """Script calls that need not go alone: another round trip (``take``, then ``replies``)
    may carry them, as the WARC reservation carries a page's admissions (warc_appends.py,
    issue 32). :meth:`settle` sends those no one carried, through ``client`` (a patient one:
    worker/runtime/room.py), and hands each reply to its ``after``. A carried call refused for memory
    is sent again alone on ``client``, which waits for room as it would have; any other error
    raises. Nothing may depend on a carried call before :meth:`settle` returns."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.calls: list[Call] = []
        self.afters: list[Callable[[Any], Any]] = []
        self.sent: list[Any] | None = None

    def add(self, call: Call, after: Callable[[Any], Any]) -> None:
        self.calls.append(call)
        self.afters.append(after)

    def take(self) -> list[Call]:
        """The calls for a carrier to send (none once settled); it must then give their
        replies to :meth:`replies` or raise (they are sent here at :meth:`settle`)."""
        return self.calls if self.sent is None else []

    def replies(self, replies: list[Any]) -> None:
        """The carrier's replies (run_each's: an error in a reply's place)."""
        self.sent = replies

    def settle(self) -> None:
        """Each call's reply to its ``after``, the calls no carrier sent sent now."""
        replies = self.sent if self.sent is not None else [None] * len(self.calls)
        self.sent = []
        for call, after, reply in zip(self.calls, self.afters, replies, strict=True):
            if reply is None or isinstance(reply, OutOfMemoryError):
                reply = call.run(self.client)  # each alone, as without a carrier
            elif isinstance(reply, Exception):
                raise reply
            after(reply)
