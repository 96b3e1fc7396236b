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
import importlib.util
import json
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import StoreUnavailable
from ..state import objects, workers
from ..state.objects import ObjectStore
from ..state.segments import Segments
from ..worker.output.read import latest_items, latest_pages
from . import wacz as wacz_file
from .cli_common import Fail, broker_option, handle, json_option, say

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


def check_target(path: Path, overwrite: bool, formats: tuple[str, ...] = FORMATS) -> None:
    """Everything that can be known before reading a record: one line each (exit 2)."""
    if path.is_dir():
        raise Fail(f"{path} is a directory")
    if path.suffix.lower() not in formats:
        raise Fail(f"{path}: unknown format {path.suffix!r}; use one of {', '.join(formats)}")
    if path.suffix.lower() == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise Fail("Parquet needs pyarrow: pip install 'crawler-tasks[export]'")
    if path.exists() and not overwrite:
        raise Fail(f"{path} exists: -O overwrites it")
    parent = path.parent
    if not parent.is_dir():
        raise Fail(f"no directory {parent} to write {path.name} in")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Fail(f"cannot write in {parent}: permission denied")


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


def records(directory: Path | ObjectStore, what: str) -> Iterator[dict[str, Any]]:
    if what == "pages":
        return latest_pages(directory)
    # Each item says which page it came from (a key of the item's own wins).
    return ({"page_url": line["url"], **line["item"]} for line in latest_items(directory))


def output_place(crawl: Any) -> tuple[Path, str]:
    """``(directory, where)``: the crawl's files as its workers wrote them (the directory of
    the ``summary.json`` its finisher wrote, on the host it names), else where this host's
    workers would write; ``where`` says it in words, naming the host when it is another."""
    if objects.is_url(crawl.options.output):  # read from the store, wherever the workers ran
        return Path(), f"{crawl.options.output}/{crawl.id}"
    state = crawl.store.lifecycle.read()
    if state.summary_path:
        directory, host = Path(state.summary_path).parent, state.summary_host or ""
        if host and host != socket.gethostname():
            return directory, f"{directory} on host {host}"
        return directory, str(directory)
    here = crawl.output_dir
    if crawl.options.output:
        return here, str(here)
    return here, f"<CRAWLER_OUTPUT_DIR of each worker>/{crawl.id} (here: {here})"


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


def target_of(new_file: Path | None, any_file: Path | None, wacz: bool) -> Path:
    """The file to write, checked (check_target) before anything is read."""
    if (new_file is None) == (any_file is None):
        raise Fail("give the file once: -o FILE (new) or -O FILE (replaced)")
    # An object store as the target is not written yet: never a local directory named "s3:".
    if objects.looks_like_url(str(new_file or any_file)):
        raise Fail(f"{new_file or any_file}: export writes a local file (upload it after)")
    target = (new_file or any_file or Path()).absolute()
    check_target(target, any_file is not None, (".wacz",) if wacz else FORMATS)
    if wacz and importlib.util.find_spec("cdxj_indexer") is None:
        raise Fail("WACZ needs cdxj-indexer: pip install 'crawler-tasks[export]'")
    return target


def write_wacz(crawl_id: str, place: Path | ObjectStore, target: Path) -> int:
    """The crawl's WACZ (surface/wacz.py); one line if it wrote no WARC file."""
    names = wacz_file.warc_names(place)
    if not names:
        where = getattr(place, "url", place)
        raise Fail(f"crawl {crawl_id} has no WARC files in {where}: nothing to archive")
    return wacz_file.write(place, names, target, crawl_id)


@click.command("export")
@click.argument("crawl_id")
@click.option("--items", is_flag=True, help="The extraction hook's items (with page_url).")
@click.option("--pages", is_flag=True, help="The page records.")
@click.option("--wacz", is_flag=True, help="The WARCs, index and pages as one .wacz (WACZ 1.1.1).")
@click.option("-o", "new_file", type=click.Path(path_type=Path), help="Write FILE (new).")
@click.option("-O", "any_file", type=click.Path(path_type=Path), help="Write FILE, replacing it.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="The crawl's output directory (default: asked of the broker).",
)
@broker_option
@json_option("Print what was written as one JSON object on stdout.")
def export(
    crawl_id: str,
    items: bool,
    pages: bool,
    wacz: bool,
    new_file: Path | None,
    any_file: Path | None,
    directory: Path | None,
    broker: str | None,
    as_json: bool,
) -> None:
    """Write a crawl's items or pages (last record per URL, every worker's files merged) as
    .jsonl, .json, .csv or .parquet, or the crawl as a web archive (--wacz: its WARC files,
    a CDXJ index and its pages in one .wacz that ReplayWeb.page and pywb open)."""
    if items + pages + wacz != 1:
        raise Fail("say what to export: --items, --pages or --wacz (one of them)")
    what = "items" if items else "pages" if pages else "wacz"
    target = target_of(new_file, any_file, wacz)
    place: Path | ObjectStore | None = directory
    if directory is None:
        crawl = handle(crawl_id, broker)
        place = stored_place(crawl)
        if place is None:
            directory, where = output_place(crawl)
            if not directory.is_dir():
                raise Fail(
                    f"no output of crawl {crawl_id} here: its files are in {where}; --dir DIR"
                )
            place = directory
    elif not directory.is_dir():
        raise Fail(f"no output of crawl {crawl_id} here: its files are in {directory}; --dir DIR")
    assert place is not None
    try:
        n = write_wacz(crawl_id, place, target) if wacz else write(records(place, what), target)
    except StoreUnavailable as exc:
        raise Fail(f"crawl {crawl_id}: cannot read {exc.directory}: {exc.why}") from None
    if as_json:
        written = {"crawl_id": crawl_id, "what": what, "count": n, "path": str(target)}
        say(True, {**written, "directory": str(getattr(place, "url", place))}, "")
        return
    noun = "pages archived" if wacz else what
    click.echo(f"{n} {noun} of crawl {crawl_id} written to {target}", err=True)
