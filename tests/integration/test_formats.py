"""The Python<->Lua formats against a real Redis: the Lua scripts write what ``formats`` parses,
and every key a crawl writes is described in ``keys.py``. The declarations' own checks:
tests/unit/test_formats.py."""

from __future__ import annotations

import re

from crawler_tasks import start_crawl
from crawler_tasks.state import formats
from crawler_tasks.state.crawl_state import FIELDS, Note
from crawler_tasks.state.formats import Inflight, LeaseEnd, Status
from tests.support.key_table import state_fields, table, undescribed
from tests.unit.test_formats import LUA


def test_release_and_start_write_what_formats_parse(settings, client) -> None:  # type: ignore[no-untyped-def]
    crawl = start_crawl(
        ["http://127.0.0.61:8000/a"], settings=settings, allow_private_networks=True
    )
    ((domain, depth, url),) = crawl.store.frontier.release_all(10, 180).entries
    assert (domain, depth, url) == ("127.0.0.61", 0, "http://127.0.0.61:8000/a")
    released = Inflight.parse(client.hget(crawl.ck.for_url(url).inflight, url).decode())
    assert (released.domain, released.depth, released.started) == (domain, 0, False)
    assert released.released_at > 0
    assert crawl.store.ledger.start(url, "host-1") == 1
    started = Inflight.parse(client.hget(crawl.ck.for_url(url).inflight, url).decode())
    assert (started.stage, started.worker) == ("s", "host-1")
    assert started.released_at == released.released_at
    assert crawl.store.ledger.start(url, "host-2", "p") == 1  # the stage moves on, once
    parsed = Inflight.parse(client.hget(crawl.ck.for_url(url).inflight, url).decode())
    assert (parsed.stage, parsed.worker, parsed.depth) == ("p", "host-2", 0)


def test_urls_of_one_message_start_together_each_on_its_own(settings, client) -> None:  # type: ignore[no-untyped-def]
    """A fetch_many message's URLs begin in one start.lua call; each gets its own answer: in
    flight, final with its record unwritten, a duplicate; then cancelled, once the crawl is."""
    seeds = [f"http://127.0.0.{n}:8000/" for n in (64, 65, 66)]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True)
    released = [url for _, _, url in crawl.store.frontier.release_all(10, 180).entries]
    assert sorted(released) == seeds
    ledger = crawl.store.ledger
    unwritten, written, running = seeds
    assert ledger.finish(unwritten, formats.Unwritten("r", "/o.jsonl", 1.0, {}), {}) > 0
    assert ledger.finish(written, None, {}) > 0
    never = "http://127.0.0.67:8000/"
    got = ledger.start_many([*seeds, never], "host-1")
    assert {u: b.code for u, b in got.items()} == {unwritten: 2, written: 0, running: 1, never: 0}
    crawl.cancel()
    got = ledger.start_many([running, written], "host-2")
    assert {u: b.code for u, b in got.items()} == {running: 3, written: 0}


def test_a_fetch_of_a_dead_host_begins_without_a_send_slot(settings, client) -> None:  # type: ignore[no-untyped-def]
    """start.lua: a URL of a host declared dead (done.lua) gets 4 and takes no slot of the
    host's send gate (gate_lib.lua); a live host's URL takes one."""
    seeds = ["http://127.0.0.69:8000/", "http://127.0.0.70:8000/"]
    crawl = start_crawl(seeds, settings=settings, allow_private_networks=True, rate=4)
    released = {url: domain for domain, _, url in crawl.store.frontier.release_all(10, 180).entries}
    dead, live = seeds
    hashes = {url: crawl.ck.for_domain(d).domain(d) for url, d in released.items()}
    client.hset(hashes[dead], "dead", "1")
    before = {url: client.hget(key, "sg") for url, key in hashes.items()}
    got = crawl.store.ledger.start_many(seeds, "host-1")
    assert {u: b.code for u, b in got.items()} == {dead: 4, live: 1}
    assert got[dead].wait == 0.0
    assert client.hget(hashes[dead], "sg") == before[dead]
    assert client.hget(hashes[live], "sg") != before[live]


def test_requeue_writes_a_retry_member_release_reads_back(settings, client) -> None:  # type: ignore[no-untyped-def]
    seed = "http://127.0.0.62:8000/x?a=1"
    crawl = start_crawl([seed], settings=settings, allow_private_networks=True, rate=1000)
    ((domain, depth, url),) = crawl.store.frontier.release_all(10, 180).entries
    assert crawl.store.ledger.requeue(domain, depth, url, 0.0)
    (member,) = client.zrange(crawl.ck.for_url(url).retry, 0, -1)
    assert member.decode() == formats.retry_member(domain, depth, url)
    crawl.store.politeness.lease(url, domain).release(LeaseEnd.OK)
    assert crawl.store.frontier.release_all(10, 180).entries == [(domain, depth, url)]


def test_an_unwritten_record_is_claimed_once(settings, client) -> None:  # type: ignore[no-untyped-def]
    """finish.lua's entry, read by two processes that find it orphaned at once: claim.lua lets
    one of them write it; the claim names the new writer's file."""
    crawl = start_crawl(["http://127.0.0.63:8000/"], settings=settings, allow_private_networks=True)
    ((_domain, _depth, url),) = crawl.store.frontier.release_all(10, 180).entries
    ledger, records = crawl.store.ledger, crawl.store.unwritten
    entry = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.123456, {"url": url, "n": 1.5})
    assert ledger.finish(url, entry, {}) == 0
    read = records.get(url)
    assert read == entry
    mine = formats.Unwritten(read.rid, "/out/b.jsonl", 1764140009.5, read.record)
    theirs = formats.Unwritten(read.rid, "/out/c.jsonl", 1764140009.6, read.record)
    assert records.claim(url, read, mine)
    assert not records.claim(url, read, theirs)
    assert records.get(url) == mine
    records.written(url)
    assert not records.claim(url, mine, theirs)


def test_a_commit_is_the_writers_whose_entry_is_stored(settings, client) -> None:  # type: ignore[no-untyped-def]
    """commit.lua keeps a copy only for the entry stored now: same rid, path AND time. A
    claimer in the writer's own file differs by its time only, by a digit (1.5 and 1.55)."""
    crawl = start_crawl(["http://127.0.0.68:8000/"], settings=settings, allow_private_networks=True)
    ((_domain, _depth, url),) = crawl.store.frontier.release_all(10, 180).entries
    ledger, records = crawl.store.ledger, crawl.store.unwritten
    record = {"url": url, "outlinks": [f"http://127.0.0.68:8000/{i}" for i in range(300)]}
    first = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.5, record)
    assert ledger.finish(url, first, {}) == 0
    again = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.55, record)
    assert records.claim(url, first, again)
    for wrong in (
        first,
        formats.Unwritten("r2", again.path, again.ts, record),
        formats.Unwritten("r1", "/out/a.jsonl.1", again.ts, record),
    ):
        assert records.commit(url, wrong) is formats.Committed.MOVED
        assert records.get(url) == again
    assert records.commit(url, again) is formats.Committed.OURS
    assert records.get(url) is None


def test_the_table_check_catches_an_undescribed_key(client) -> None:  # type: ignore[no-untyped-def]
    assert len(table()) >= 25
    client.set("crawler:20260101-000000-abcdef:stray", "1")
    client.hset("crawler:20260101-000000-abcdef:config", "wrong", "type")
    # A note under a literal name neither CrawlState nor the table knows.
    client.hset("crawler:{20260101-000000-abcdef}:state", mapping={"status": "running", "why": "x"})
    assert sorted(undescribed(client)) == [
        "crawler:20260101-000000-abcdef:config (hash)",
        "crawler:20260101-000000-abcdef:stray (string)",
        "crawler:{20260101-000000-abcdef}:state field why",
    ]
    assert state_fields() == FIELDS, "keys.py's table and CrawlState name the same fields"


def test_the_state_hash_reads_as_one_typed_value(settings) -> None:  # type: ignore[no-untyped-def]
    crawl = start_crawl(["http://127.0.0.68:8000/"], settings=settings, allow_private_networks=True)
    status = crawl.store.lifecycle
    status.first_note(Note.ROBOTS_UNREACHABLE_WHY, "http://a: refused")
    status.first_note(Note.ROBOTS_UNREACHABLE_WHY, "http://b: later")
    status.note(Note.SUMMARY_PATH, "/data/x/summary.json")
    assert crawl.pause()
    state = status.read()
    assert state.status is Status.PAUSED and state.paused and not state.cancelled
    assert state.started_at == crawl.options.started_at and state.finished_at is None
    assert state.robots_unreachable_why == "http://a: refused"
    assert state.summary_path == "/data/x/summary.json"
    assert crawl.progress()["summary_path"] == "/data/x/summary.json"


def test_finishing_lua_writes_the_status_values(settings, client) -> None:  # type: ignore[no-untyped-def]
    """finishing.lua's literals are Status values: it marks a drained crawl (running, paused
    or cancelling) finishing with the final status it will have, and leaves a final one alone."""
    Status = formats.Status
    source = (LUA / "finishing.lua").read_text("utf-8")
    code = "\n".join(line for line in source.splitlines() if not line.startswith("--"))
    literals = set(re.findall(r"status == '(\w+)'|final = '(\w+)'|'status', '(\w+)'", code))
    assert {v for group in literals for v in group if v} <= {s.value for s in Status}
    for paused, cancel, final in [(False, False, Status.FINISHED), (True, True, Status.CANCELLED)]:
        crawl = start_crawl(
            ["http://127.0.0.68:8000/"], settings=settings, allow_private_networks=True
        )
        status = crawl.store.lifecycle
        assert status.status() is Status.RUNNING
        assert not paused or (crawl.pause() and status.status() is Status.PAUSED)
        assert not cancel or (crawl.cancel() and status.status() is Status.CANCELLING)
        assert not status.finishing()  # its seed is outstanding
        if cancel:  # its seed counted cancelled, unreleased (cancel.lua)
            assert crawl.store.frontier.release_all(10, 180).entries == []
            assert tuple(crawl.store.frontier.cancel_pending(0)) == (1, 0)
        else:
            ((_domain, _depth, url),) = crawl.store.frontier.release_all(10, 180).entries
            assert crawl.store.ledger.finish(url, None, {}) == 0
        assert status.finishing() and status.finishing()
        state = status.read()
        assert (state.status, state.final_status) == (Status.FINISHING, final)
        assert not crawl.resume() and status.steering() is formats.Steering.FINISHING
        crawl.store.finisher.finished(final)
        assert crawl.status is final and crawl.finished and not crawl.pause()
        assert status.finishing() is False  # final: finishing.lua leaves it
