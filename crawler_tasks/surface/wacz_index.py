"""The index of a WACZ (WACZ 1.1.1's ``indexes/``): a sorted CDXJ of every capture, made by
``cdxj-indexer``, the replay tools' own indexer.

A small crawl's is one plain file, ``indexes/index.cdx`` (CDXJ lines; the name py-wacz gives
it and pywb's ``wb-manager add`` reads: wacz.py). Above ``wacz_index_lines`` lines
(settings.py) it is the compressed ZipNum index the spec gives for large collections:
``indexes/index.cdx.gz``, the same sorted lines in gzip members of ``BLOCK_LINES`` lines each,
and ``indexes/index.idx``, a line per member (its first key, offset, length and sha256), so
that a replay tool reads the small ``.idx`` and then only the blocks a lookup needs, where
it would read a plain index whole first. The blocks are written by cdxj-indexer's own
``CompressedWriter`` (what its ``--compress`` option runs), fed the sorted plain index.
"""

from __future__ import annotations

from pathlib import Path

#: Lines per gzip member of ``index.cdx.gz`` (cdxj-indexer's and pywb's ZipNum default).
BLOCK_LINES = 300
PLAIN, COMPRESSED, BLOCKS = "index.cdx", "index.cdx.gz", "index.idx"


def make(warcs: list[Path], staging: Path, plain_max: int) -> list[tuple[str, Path]]:
    """Index ``warcs`` in ``staging``; the WACZ entries ``(path in the ZIP, local file)``:
    the plain index up to ``plain_max`` lines, else the ZipNum pair."""
    from cdxj_indexer.main import CDXJIndexer

    plain = staging / PLAIN
    # The filename field is each WARC's base name: its path under archive/, as the spec asks.
    CDXJIndexer(output=str(plain), inputs=[str(w) for w in warcs], sort=True).process_all()
    with open(plain, "rb") as f:
        lines = sum(1 for _ in f)
    if lines <= plain_max:
        return [(f"indexes/{PLAIN}", plain)]
    return _zipnum(plain, staging)


def _zipnum(plain: Path, staging: Path) -> list[tuple[str, Path]]:
    from cdxj_indexer.main import CompressedWriter

    blocks, compressed = staging / BLOCKS, staging / COMPRESSED
    with (
        open(plain, encoding="utf-8") as source,
        open(blocks, "w", encoding="utf-8") as idx,
        open(compressed, "wb") as cdx,
    ):
        writer = CompressedWriter(
            idx, cdx, num_lines=BLOCK_LINES, data_out_name=COMPRESSED, digest_records=True
        )
        for line in source:
            writer.write(line)
        # Its flush of an empty last block would add a member and an .idx line with an empty
        # key (out of order): only a block with lines is written.
        if writer.block:
            writer.flush()
    plain.unlink()
    return [(f"indexes/{COMPRESSED}", compressed), (f"indexes/{BLOCKS}", blocks)]
