"""``crawler export``: a crawl's items or pages as one file people's tools read, as Scrapy's
``-O items.json`` feed and Crawlee's dataset export give them.

The crawl's files are append-only logs written by every worker process (``pages-*.jsonl``,
``items-*.jsonl``); the export merges them, keeps each URL's last record (``retry-failed``
adds records), and writes the file in one step (a temporary file renamed over it), so that a
reader never sees half an export and an interrupted export leaves nothing. The format follows
the extension: ``.jsonl``, ``.json`` (one array), ``.csv`` (a column per key, in first-seen
order; lists and objects as JSON) and ``.parquet`` (pyarrow, ``crawler-tasks[export]``;
a column per key, lists as lists).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import OutputUnreadable, StoreUnavailable
from ..settings import load
from ..state import objects, workers
from ..state.objects import ObjectStore
from ..state.segments import Segments
from ..worker.output.read import Directories, Place, latest_items, latest_pages
from . import places
from . import wacz as wacz_file
from .cli_common import Fail, broker_option, handle, json_option, say
from .export_target import target_of

Rows = Iterable[dict[str, Any]]


def _jsonl(rows: Rows, f: Any) -> None:
    for row in rows:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _json(rows: Rows, f: Any) -> None:
    f.write("[")
    for i, row in enumerate(rows):
        f.write(("," if i else "") + "\n" + json.dumps(row, ensure_ascii=False))
    f.write("\n]\n")


def _flat(rows: Rows) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns in first-seen order; values that are lists or objects as JSON text."""
    columns: dict[str, None] = {}
    flat = []
    for row in rows:
        flat.append({k: _cell(v) for k, v in row.items()})
        columns.update(dict.fromkeys(row))
    return list(columns), flat


def _cell(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value


def _csv(rows: Rows, f: Any) -> None:
    columns, flat = _flat(rows)
    writer = csv.DictWriter(f, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)


def _parquet(rows: Rows, path: Path) -> None:
    """Columns as in CSV, but lists and objects stay lists and structs where a column's
    values share one type (JSON text where they do not, then any text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    arrays = []
    for name in columns:
        values = [row.get(name) for row in rows]
        for cell in (lambda v: v, _cell, lambda v: None if v is None else str(v)):
            try:
                arrays.append(pa.array([cell(v) for v in values]))
                break
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types
                continue
    pq.write_table(pa.Table.from_arrays(arrays, names=columns), path)


TEXT_FORMATS: dict[str, Callable[[Rows, Any], None]] = {
    ".jsonl": _jsonl,
    ".json": _json,
    ".csv": _csv,
}
FORMATS = (*TEXT_FORMATS, ".parquet")


def write(rows: Rows, path: Path) -> int:
    """Write ``rows`` to ``path`` in its extension's format, all at once; the row count."""
    counted: list[dict[str, Any]] = list(rows)
    tmp = path.with_name(f".{path.name}.export-{os.getpid()}")
    try:
        if path.suffix.lower() == ".parquet":
            _parquet(counted, tmp)
        else:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                TEXT_FORMATS[path.suffix.lower()](counted, f)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return len(counted)


def records(directory: Place, what: str) -> Iterator[dict[str, Any]]:
    if what == "pages":
        return latest_pages(directory)
    # Each item says which page it came from (a key of the item's own wins).
    return ({"page_url": line["url"], **line["item"]} for line in latest_items(directory))


def output_place(crawl: Any) -> str:
    """Where the crawl's files are, in words: its objects, the directories its processes
    wrote to (surface/places.py) once they did, else where workers would write them."""
    if objects.is_url(crawl.options.output):  # read from the store, wherever the workers ran
        return f"{crawl.options.output}/{crawl.id}"
    found = places.find(crawl)
    if isinstance(found.place, Directories):
        return "; ".join([found.where, *found.unread])
    here = crawl.output_dir
    if crawl.options.output:
        return str(here)
    return f"<CRAWLER_OUTPUT_DIR of each worker>/{crawl.id} (here: {here})"


def local_place(crawl: Any, partial: bool) -> tuple[Place, tuple[str, ...]]:
    """The directories of a crawl with local output that this host reads, and those left
    out (only with ``partial``: else one line naming them, exit 2)."""
    found = places.find(crawl)
    try:
        place = found.readable(crawl.id, partial)
    except OutputUnreadable as exc:
        raise Fail(
            f"{exc}; export on the host that holds them, or --partial for the rest"
        ) from None
    if isinstance(place, Directories):
        if not place:
            raise Fail(f"crawl {crawl.id}: none of its output directories can be read here")
        return place, found.unread
    if not Path(str(place)).is_dir():
        where = output_place(crawl)
        raise Fail(f"no output of crawl {crawl.id} here: its files are in {where}; --dir DIR")
    return place, ()


def stored_place(crawl: Any) -> ObjectStore | None:
    """An s3:// crawl's objects, once nothing of it waits to be uploaded: its segments still
    staged on a worker are said in one line (never a silent partial export)."""
    if not objects.is_url(crawl.options.output):
        return None
    alive = workers.alive(crawl.client, crawl.keys, crawl.settings.worker_dead_seconds)
    waiting = Segments(crawl.client, crawl.keys, crawl.id).waiting(alive)
    if waiting.waiting:
        raise Fail(f"crawl {crawl.id}: {waiting.line()}; export again once they are uploaded")
    store: ObjectStore = crawl.files
    return store


def write_wacz(crawl_id: str, place: Place, target: Path) -> int:
    """The crawl's WACZ (surface/wacz.py); one line if it wrote no WARC file."""
    names = wacz_file.warc_names(place)
    if not names:
        where = getattr(place, "url", place)
        raise Fail(f"crawl {crawl_id} has no WARC files in {where}: nothing to archive")
    # Where a big crawl's index is compressed: CRAWLER_WACZ_INDEX_LINES (settings.py).
    return wacz_file.write(place, names, target, crawl_id, load().wacz_index_lines)


def place_of(crawl_id: str, directory: Path | None, broker: str | None, partial: bool) -> tuple[Place, tuple[str, ...]]:  # fmt: skip
    """Where to read the crawl, and the directories left out (``--partial``)."""
    if directory is not None:  # the user's word: a crawl whose Redis state expired
        if not directory.is_dir():
            raise Fail(f"no output of crawl {crawl_id} here: no directory {directory}")
        return directory, ()
    crawl = handle(crawl_id, broker)
    stored = stored_place(crawl)
    return (stored, ()) if stored is not None else local_place(crawl, partial)


@click.command("export")
@click.argument("crawl_id")
@click.option("--items", is_flag=True, help="The extraction hook's items (with page_url).")
@click.option("--pages", is_flag=True, help="The page records.")
@click.option("--wacz", is_flag=True, help="The WARCs, index and pages as one .wacz (WACZ 1.1.1).")
# Text, not click's Path: "s3://bucket/x" as a Path is "s3:/bucket/x" (export_target.py).
@click.option("-o", "new_file", help="Write FILE (new), or an s3:// object (--wacz).")
@click.option("-O", "any_file", help="Write FILE, replacing it (or an s3:// object).")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="The crawl's output directory (default: asked of the broker).",
)
@click.option(
    "--partial",
    is_flag=True,
    help="Export what this host can read when some of the crawl's output directories are "
    "another host's (or gone), and name those left out (default: refuse, exit 2).",
)
@broker_option
@json_option("Print what was written as one JSON object on stdout.")
def export(
    crawl_id: str,
    items: bool,
    pages: bool,
    wacz: bool,
    new_file: str | None,
    any_file: str | None,
    directory: Path | None,
    partial: bool,
    broker: str | None,
    as_json: bool,
) -> None:
    """Write a crawl's items or pages (last record per URL, every worker's files merged) as
    .jsonl, .json, .csv or .parquet, or the crawl as a web archive (--wacz: its WARC files,
    a CDXJ index and its pages in one .wacz that ReplayWeb.page and pywb open; -o may name
    an s3:// object)."""
    if items + pages + wacz != 1:
        raise Fail("say what to export: --items, --pages or --wacz (one of them)")
    what = "items" if items else "pages" if pages else "wacz"
    target = target_of(new_file, any_file, wacz, FORMATS)
    place, left_out = place_of(crawl_id, directory, broker, partial)
    for line in left_out:
        click.echo(f"left out (--partial): {line}", err=True)
    try:
        with target.writing() as path:
            n = write_wacz(crawl_id, place, path) if wacz else write(records(place, what), path)
    except StoreUnavailable as exc:
        raise Fail(f"crawl {crawl_id}: cannot use {exc.directory}: {exc.why}") from None
    if as_json:
        written = {"crawl_id": crawl_id, "what": what, "count": n, "path": str(target)}
        read = place if isinstance(place, Directories) else [getattr(place, "url", place)]
        read = [str(d) for d in read]
        say(True, {**written, "directories": read, "left_out": list(left_out)}, "")
        return
    noun = "pages archived" if wacz else what
    click.echo(f"{n} {noun} of crawl {crawl_id} written to {target}", err=True)
