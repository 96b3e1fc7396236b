"""The Python<->Lua formats and the key table are one source of truth: the Lua scripts write
what ``formats`` parses, and every key a crawl writes is described in ``keys.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crawler_tasks.state import calls, formats
from crawler_tasks.state.formats import Inflight
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


def test_counter_names_are_plain_strings() -> None:
    assert formats.Counter.DONE == "done" and str(formats.Counter.DONE) == "done"
    assert {"done": 1}[formats.Counter.DONE] == 1
    assert formats.failed("timeout") == "failed:timeout"
    assert set(formats.FAMILIES) == {"status", "failed", "skipped", "change"}
    assert {formats.links_dropped("x").split(":")[0], *formats.FAMILIES} == formats.FAMILY_PREFIXES


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


def test_release_call_fills_every_argument_release_lua_reads() -> None:
    source = (LUA / "release.lua").read_text("utf-8")
    documented = max(int(n) for n in re.findall(r"ARGV\[(\d+)\]", source))
    call = calls.ReleaseCall(
        10, "q:", "l:", "d:", 180, float("inf"), 1, 2, "w", None, "", "",
        formats.Steering.PAUSED, "a\tb", 0.5, 2, "p:{c/0}:ip",
        (4, 300.0, 1.0, 128, "sp:", "ix:", "d:"), True,
    )  # fmt: skip
    args = call.args()
    assert len(args) == documented == 25
    assert (args[5], args[9], args[12], args[13]) == ("inf", "inf", "paused", "a\tb")
    assert args[14:17] == [0.5, 2, "p:{c/0}:ip"]
    assert args[17:] == [4, 300.0, 1.0, 128, "sp:", "ix:", "d:", 1]  # tails_lib.lua, dfs
    # The steering word release.lua compares its steering argument with: anything but
    # "run" releases nothing (paused, cancelled).
    compared = set(re.findall(r"ARGV\[13\] [~=]= '(\w+)'", source))
    assert compared == {formats.Steering.RUN.value}


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
