"""``crawler export``: a crawl's items or pages as one file people's tools read, as Scrapy's
``-O items.json`` feed and Crawlee's dataset export give them.

The crawl's files are append-only logs written by every worker process (``pages-*.jsonl``,
``items-*.jsonl``); the export merges them, keeps each URL's last record (``retry-failed``
adds records), and writes the file in one step (a temporary file renamed over it), so that a
reader never sees half an export and an interrupted export leaves nothing. The format follows
the extension: ``.jsonl``, ``.json`` (one array), ``.csv`` (a column per key, in first-seen
order; lists and objects as JSON) and ``.parquet`` (pyarrow, ``crawler-tasks[export]``;
columns as in CSV).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from ..worker.output import latest_items, latest_pages
from .cli_common import Fail, broker_option, handle

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
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns, flat = _flat(rows)
    arrays = []
    for name in columns:
        values = [row.get(name) for row in flat]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: text, as CSV has it
            arrays.append(pa.array([None if v is None else str(v) for v in values]))
    pq.write_table(pa.Table.from_arrays(arrays, names=columns), path)


TEXT_FORMATS: dict[str, Callable[[Rows, Any], None]] = {
    ".jsonl": _jsonl,
    ".json": _json,
    ".csv": _csv,
}
FORMATS = (*TEXT_FORMATS, ".parquet")


def check_target(path: Path, overwrite: bool) -> None:
    """Everything that can be known before reading a record: one line each (exit 2)."""
    if path.is_dir():
        raise Fail(f"{path} is a directory")
    if path.suffix.lower() not in FORMATS:
        raise Fail(f"{path}: unknown format {path.suffix!r}; use one of {', '.join(FORMATS)}")
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


def records(directory: Path, what: str) -> Iterator[dict[str, Any]]:
    if what == "pages":
        return latest_pages(directory)
    return (line["item"] for line in latest_items(directory))


@click.command("export")
@click.argument("crawl_id")
@click.option("--items", "what", flag_value="items", help="The extraction hook's items.")
@click.option("--pages", "what", flag_value="pages", help="The page records.")
@click.option("-o", "new_file", type=click.Path(path_type=Path), help="Write FILE (new).")
@click.option("-O", "any_file", type=click.Path(path_type=Path), help="Write FILE, replacing it.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    help="The crawl's output directory (default: asked of the broker).",
)
@broker_option
def export(
    crawl_id: str,
    what: str | None,
    new_file: Path | None,
    any_file: Path | None,
    directory: Path | None,
    broker: str | None,
) -> None:
    """Write a crawl's items or pages (last record per URL, every worker's files merged) as
    .jsonl, .json, .csv or .parquet."""
    if what is None:
        raise Fail("say what to export: --items or --pages")
    if (new_file is None) == (any_file is None):
        raise Fail("give the file once: -o FILE (new) or -O FILE (replaced)")
    target = (new_file or any_file or Path()).absolute()
    check_target(target, overwrite=any_file is not None)
    if directory is None:
        directory = handle(crawl_id, broker).output_dir
    if not directory.is_dir():
        raise Fail(f"no output of crawl {crawl_id} in {directory} (on this host)")
    n = write(records(directory, what), target)
    click.echo(f"{n} {what} of crawl {crawl_id} written to {target}", err=True)
