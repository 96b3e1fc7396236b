"""The Python<->Lua formats and the key table are one source of truth: the Lua scripts write
what ``formats`` parses, and every key a crawl writes is described in ``keys.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crawler_tasks import start_crawl
from crawler_tasks.state import calls, formats, keys
from crawler_tasks.state.crawl_state import FIELDS, Note
from crawler_tasks.state.formats import Inflight, LeaseEnd, Status
from crawler_tasks.worker.output.files import page_text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("example.org|1700000000|3", Inflight("example.org", 1700000000.0, 3)),
        ("example.org|1700000000|3|s:h-12", Inflight("example.org", 1700000000.0, 3, "s", "h-12")),
        ("127.0.0.1:8000|0|0|p:a-b-1", Inflight("127.0.0.1:8000", 0.0, 0, "p", "a-b-1")),
    ],
)
def test_inflight_values(value: str, expected: Inflight) -> None:
    assert Inflight.parse(value) == expected


@pytest.mark.parametrize("url", ["http://a.test/", "http://a.test/x|y?q=1|2", "http://a.test/%7C"])
def test_entries_round_trip_urls_with_bars(url: str) -> None:
    assert formats.parse_entry(formats.entry(7, url)) == (7, url)
    domain, _, rest = formats.retry_member("a.test", 7, url).partition("\t")
    assert domain == "a.test" and formats.parse_entry(rest) == (7, url)


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
    ledger = crawl.store.ledger
    entry = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.123456, {"url": url, "n": 1.5})
    assert ledger.finish(url, entry, {}) == 0
    read = ledger.unwritten(url)
    assert read == entry
    mine = formats.Unwritten(read.rid, "/out/b.jsonl", 1764140009.5, read.record)
    theirs = formats.Unwritten(read.rid, "/out/c.jsonl", 1764140009.6, read.record)
    assert ledger.claim(url, read, mine)
    assert not ledger.claim(url, read, theirs)
    assert ledger.unwritten(url) == mine
    ledger.written(url)
    assert not ledger.claim(url, mine, theirs)


@pytest.mark.parametrize(
    "entry",
    [
        formats.Unwritten("r1", "/out/a.jsonl", 1764140000.123456, {"url": "u", "n": 1.5}),
        formats.Unwritten('é"\\/', "/out/ü ö/\u2028.jsonl", 1.0, {}),
        formats.Unwritten("r", "/o.jsonl", 1e22, {"rid": "r", "ts": 2.0}),
    ],
)
def test_an_unwritten_entry_begins_with_its_head(entry: formats.Unwritten) -> None:
    """commit.lua compares the stored entry's first bytes with ``head()``: exactly the text
    ``dumps()`` writes before the record, which it must end at (a ts that only begins like
    another's, 1.5 and 1.55, must not match)."""
    assert entry.dumps().startswith(entry.head())
    assert entry.head().endswith(',"record":')
    assert formats.Unwritten.loads(entry.head() + "{}}") == formats.Unwritten(
        entry.rid, entry.path, entry.ts, {}
    )


def test_a_commit_is_the_writers_whose_entry_is_stored(settings, client) -> None:  # type: ignore[no-untyped-def]
    """commit.lua keeps a copy only for the entry stored now: same rid, path AND time. A
    claimer in the writer's own file differs by its time only, by a digit (1.5 and 1.55)."""
    crawl = start_crawl(["http://127.0.0.68:8000/"], settings=settings, allow_private_networks=True)
    ((_domain, _depth, url),) = crawl.store.frontier.release_all(10, 180).entries
    ledger = crawl.store.ledger
    record = {"url": url, "outlinks": [f"http://127.0.0.68:8000/{i}" for i in range(300)]}
    first = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.5, record)
    assert ledger.finish(url, first, {}) == 0
    again = formats.Unwritten("r1", "/out/a.jsonl", 1764140000.55, record)
    assert ledger.claim(url, first, again)
    for wrong in (
        first,
        formats.Unwritten("r2", again.path, again.ts, record),
        formats.Unwritten("r1", "/out/a.jsonl.1", again.ts, record),
    ):
        assert ledger.commit(url, wrong) is formats.Committed.MOVED
        assert ledger.unwritten(url) == again
    assert ledger.commit(url, again) is formats.Committed.OURS
    assert ledger.unwritten(url) is None


def test_counter_names_are_plain_strings() -> None:
    assert formats.Counter.DONE == "done" and str(formats.Counter.DONE) == "done"
    assert {"done": 1}[formats.Counter.DONE] == 1
    assert formats.failed("timeout") == "failed:timeout"
    assert set(formats.FAMILIES) == {"status", "failed", "skipped", "change"}
    assert {formats.links_dropped("x").split(":")[0], *formats.FAMILIES} == formats.FAMILY_PREFIXES


# --- keys.py's table against the keys a crawl writes ---------------------------------------------

_ROW = re.compile(r"^    (P:\S+)\s+(string|hash|list|set|zset|-)\s", re.M)
_PLACEHOLDER = {
    "{C}": r"\{[^:{}/]+\}",
    "{C/N}": r"\{[^:{}/]+/[\d.]+\}",
    "C": r"[^:]+",
    "D": r".+",
    "N": r"\d+",
    "H": r"[0-9a-f]+",
    "S": r"[^:]+",
    "A": r".+",  # a server address (IPv6 ones have colons)
}


def table() -> list[tuple[re.Pattern[str], str]]:
    """keys.py's docstring table as (regex, type) rows (``P`` is the test's prefix)."""
    rows = []
    for pattern, kind in _ROW.findall(keys.__doc__ or ""):
        parts = []
        for i, part in enumerate(pattern.split(":")):
            if i == 0:
                parts.append("crawler")
            elif part in _PLACEHOLDER:
                parts.append(_PLACEHOLDER[part])
            elif part == "ORIGIN":
                parts.append(r"https?://.+")
            elif part == "*":
                parts.append(r".*")
            else:
                parts.append(re.escape(part))
        rows.append((re.compile(":".join(parts) + r"\Z"), kind))
    return rows


def undescribed(client) -> list[str]:  # type: ignore[no-untyped-def]
    """Keys no row of keys.py's table describes (or of another type), and fields of a
    crawl's state hash that neither the table nor CrawlState (state/crawl_state.py) names."""
    from crawler_tasks.state.crawl_state import FIELDS

    rows = table()
    documented = _state_fields()
    bad = []
    for raw in client.scan_iter(match="crawler:*", count=1000):
        key = raw.decode()
        kind = client.type(raw).decode()
        if not any(rx.match(key) and want in (kind, "-") for rx, want in rows):
            bad.append(f"{key} ({kind})")
        if key.endswith("}:state") and kind == "hash":
            fields = {f.decode() for f in client.hkeys(raw)}
            bad += [f"{key} field {f}" for f in sorted(fields - (FIELDS & documented))]
    return bad


def _state_fields() -> set[str]:
    """The fields keys.py's table lists for ``P:{C}:state``."""
    doc = keys.__doc__ or ""
    row = doc[doc.index("P:{C}:state") :].split("\n    P:", 1)[0]
    listed = row.split("hash", 1)[1].split("(", 1)[0]  # the fields, before the remark
    return set(re.findall(r"[a-z_]+", listed))


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
    assert _state_fields() == FIELDS, "keys.py's table and CrawlState name the same fields"


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


# --- counter names the Lua scripts write, statuses and steering ---------------------------------

LUA = Path(formats.__file__).resolve().parent / "lua"
_KEY_DOC = re.compile(r"KEYS\[(\d+)\]\s+(.*?)(?=\s+KEYS\[|$)", re.M)
_HINCRBY = re.compile(r"'HINCRBY',\s*([^,]+),\s*([^,]+),")
_LITERAL = re.compile(r"'([^']*)'")
_BUILT = re.compile(r"'([^']*):'\s*\.\.")


def known_counter(name: str) -> bool:
    """A Counter member, or a name of one of the families (``status:404``)."""
    family, colon, rest = name.partition(":")
    if colon:
        return family in formats.FAMILY_PREFIXES and bool(rest)
    return name in {c.value for c in formats.Counter}


def lua_counters(name: str, source: str) -> tuple[set[str], list[str]]:
    """(counter names ``source`` increments on its stats hash, problems). A field built as
    ``'family:' .. x`` counts as ``family:x``; a field from ARGV is the caller's (Python's,
    built from Counter and the families); a key the header does not describe is a problem."""
    docs = {int(n): text for n, text in _KEY_DOC.findall(source)}
    found, bad = set(), []
    for key, field in _HINCRBY.findall(source):
        index = re.fullmatch(r"KEYS\[(\d+)\]", key.strip())
        if index is None or int(index[1]) not in docs:
            bad.append(f"{name}: HINCRBY on {key.strip()}, not a KEYS[n] its header describes")
            continue
        if "stats" not in docs[int(index[1])]:
            continue  # another hash: flow "in"/"out", "reserved"
        field = field.strip()
        if built := _BUILT.match(field):
            field = f"'{built[1]}:x'"
        if literal := _LITERAL.fullmatch(field):
            found.add(literal[1])
            if not known_counter(literal[1]):
                bad.append(f"{name}: counter {literal[1]!r} is no Counter and in no family")
        elif not field.startswith("ARGV["):
            bad.append(f"{name}: counter name {field} is neither a literal nor an argument")
    return found, bad


def test_every_counter_a_lua_script_writes_is_known() -> None:
    found, bad = set(), []
    for path in sorted(LUA.glob("*.lua")):
        names, problems = lua_counters(path.name, path.read_text("utf-8"))
        found |= names
        bad += problems
    assert bad == []
    # The check saw the scripts' counters (a pattern that matches nothing passes nothing).
    assert {"queued", "admitted", "discovered", "skipped:max_pages", "replayed"} <= found


def test_the_lua_counter_check_catches_an_unknown_name() -> None:
    source = (
        "-- KEYS[1] flow hash  KEYS[2] stats hash\n"
        "redis.call('HINCRBY', KEYS[1], 'in', 1)\n"
        "redis.call('HINCRBY', KEYS[2], 'admited', 1)\n"
        "redis.call('HINCRBY', KEYS[2], 'skiped:' .. why, 1)\n"
        "redis.call('HINCRBY', KEYS[2], 'status:' .. code, 1)\n"
        "redis.call('HINCRBY', KEYS[2], name, 1)\n"
        "redis.call('HINCRBY', KEYS[3], 'queued', 1)\n"
    )
    found, bad = lua_counters("x.lua", source)
    assert found == {"admited", "skiped:x", "status:x"}
    assert bad == [
        "x.lua: counter 'admited' is no Counter and in no family",
        "x.lua: counter 'skiped:x' is no Counter and in no family",
        "x.lua: counter name name is neither a literal nor an argument",
        "x.lua: HINCRBY on KEYS[3], not a KEYS[n] its header describes",
    ]


def test_progress_and_metrics_lists_come_from_counter() -> None:
    from crawler_tasks.state.stats import _EARLY, _LATE
    from crawler_tasks.surface.metrics import _COUNTERS, _GAUGES

    assert [c.value for c in _EARLY] == ["discovered", "admitted", "deduplicated", "queued"]
    assert [c.value for c in _LATE] == [
        "done", "fetched", "parsed", "failed", "bytes", "robots_disallowed",
        "robots_unreachable", "cancelled", "rendered", "items", "extract_errors",
        "revisits", "revisits_changed", "not_due", "revisit_records", "revisit_bytes_saved",
    ]  # fmt: skip
    assert set(_COUNTERS) == {c.value for c in formats.Counter} - {"queued"}
    assert _GAUGES["queued"] == formats.Counter.QUEUED.help


def test_every_view_takes_every_counter_from_its_declaration() -> None:
    """status text, the summary, the dashboard's counters and Prometheus name every counter
    (render ones included) with the group and help text declared with it, once."""
    from rich.console import Console

    from crawler_tasks.state.stats import LIVE, declared
    from crawler_tasks.surface.display import line, table
    from crawler_tasks.surface.metrics import _COUNTERS, _GAUGES
    from crawler_tasks.surface.summary import summary_text

    values = {c.value: n for n, c in enumerate(formats.Counter, start=1)}
    rows = declared({**values, "retrying": 7})
    assert {r["name"] for r in rows} == set(values) | set(LIVE)
    assert all(r["help"] and r["group"] for r in rows)
    assert {r["name"]: r["help"] for r in rows} == {**_COUNTERS, **{
        k: v for k, v in _GAUGES.items() if k in values or k in LIVE}}  # fmt: skip
    groups = [r["group"] for r in rows]
    assert groups == sorted(groups, key=[g.value for g in formats.Group].index)
    progress = {"crawl_id": "c", "status": "running", "pages_per_s": 1.0,
                "recent_pages_per_s": 1.0, **values}  # fmt: skip
    summary = {"crawl_id": "c", "status": "finished", "duration_s": 1.0, "counters": values}
    console = Console(width=400, record=True)
    console.print(table(progress))
    for text in (line(progress), summary_text(summary), console.export_text()):
        for name in ("rendered", "robots_unreachable", "subrequests_blocked", "sitemaps"):
            assert f"{name}" in text, (name, text)
    assert formats.Counter("done") is formats.Counter.DONE and f"{formats.Counter.DONE}" == "done"


def test_finishing_lua_writes_the_status_values(settings, client) -> None:  # type: ignore[no-untyped-def]
    """finishing.lua's literals are Status values: it marks a drained crawl (running or
    paused) finishing with the final status it will have, and leaves a final one alone."""
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
        assert not cancel or crawl.cancel()
        assert not status.finishing()  # its seed is outstanding
        ((_domain, _depth, url),) = crawl.store.frontier.release_all(10, 180).entries
        assert crawl.store.ledger.finish(url, None, {}) == 0
        assert status.finishing() and status.finishing()
        state = status.read()
        assert (state.status, state.final_status) == (Status.FINISHING, final)
        assert not crawl.resume() and status.steering() is formats.Steering.FINISHING
        status.finished(final)
        assert crawl.status is final and crawl.finished and not crawl.pause()
        assert status.finishing() is False  # final: finishing.lua leaves it


def test_release_call_fills_every_argument_release_lua_reads() -> None:
    source = (LUA / "release.lua").read_text("utf-8")
    documented = max(int(n) for n in re.findall(r"ARGV\[(\d+)\]", source))
    call = calls.ReleaseCall(
        10, "q:", "l:", "d:", 180, float("inf"), 1, 2, 1000, "w", None, "", "",
        formats.Steering.PAUSED, "a\tb", 0.5, 2, "p:{c/0}:ip",
    )  # fmt: skip
    args = call.args()
    assert len(args) == documented == 18
    assert (args[5], args[10], args[13], args[14]) == ("inf", "inf", "paused", "a\tb")
    assert args[15:] == [0.5, 2, "p:{c/0}:ip"]
    # The steering words release.lua compares its last argument with.
    compared = set(re.findall(r"ARGV\[14\] == '(\w+)'", source))
    assert compared == {formats.Steering.PAUSED.value, formats.Steering.CANCELLED.value}


@pytest.mark.parametrize(
    "record",
    [
        {"url": "https://h/é", "outlinks": ["https://h/\u2028", 'x"\\'], "n": 1.5, "ok": None},
        {"url": "u", "title": "\udcff lone surrogate kept as the output writes it"},
    ],
)
def test_a_page_line_is_the_record_of_its_unwritten_entry(record: dict) -> None:
    """The recorder encodes a page's record once (output.page_text) for its pages line and its
    unwritten entry: the entry is the one dumps() writes from the record itself."""
    text = page_text(record)
    given = formats.Unwritten("r", "/o.jsonl", 2.5, record, text)
    assert given.dumps() == formats.Unwritten("r", "/o.jsonl", 2.5, record).dumps()
    assert formats.Unwritten.loads(given.dumps()).record == record
    assert json.loads(text) == record
