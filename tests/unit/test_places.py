"""Which of the directories a crawl's processes noted (state/output_places.py) this host reads
(surface/places.py sort_out): its own that are there; another host's only where they hold
that host's files (a shared volume), never the same path on this host's own disk; each
directory once."""

from __future__ import annotations

from pathlib import Path

from crawler_tasks.state.output_places import Written
from crawler_tasks.surface.places import sort_out

HERE = "this-host"


def test_this_hosts_directories_are_read_once_and_a_gone_one_is_named(tmp_path: Path) -> None:
    a, b, gone = tmp_path / "a", tmp_path / "b", tmp_path / "gone"
    a.mkdir()
    b.mkdir()
    (tmp_path / "link").symlink_to(a)
    written = [
        Written(HERE, str(a), 1),
        Written(HERE, str(a), 2),  # two processes of one directory
        Written(HERE, str(tmp_path / "link"), 3),  # the same directory by another path
        Written(HERE, str(b), 4),
        Written(HERE, str(gone), 5),
    ]
    readable, unread = sort_out(written, HERE)
    assert sorted(readable) == [a, b]
    assert unread == [f"{gone} on this host: no such directory (moved or deleted?)"]


def test_another_hosts_directory_is_read_only_where_it_holds_that_hosts_files(
    tmp_path: Path,
) -> None:
    shared, own = tmp_path / "shared", tmp_path / "own"
    shared.mkdir()
    own.mkdir()
    (shared / "pages-far-7.jsonl").write_text("")  # host far's process 7 wrote here: a volume
    (own / "pages-this-host-9.jsonl").write_text("")  # this host's files under the same path
    written = [
        Written("far", str(shared), 7),
        Written("far", str(own), 8),
        Written("far", str(tmp_path / "elsewhere"), 8),
        Written(HERE, str(own), 9),
    ]
    readable, unread = sort_out(written, HERE)
    assert sorted(readable) == [own, shared]
    assert unread == [
        f"{tmp_path / 'elsewhere'} on far: another host's directory, not readable here",
        f"{own} on far: another host's directory, not readable here",
    ]
