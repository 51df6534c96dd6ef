"""Where the report's history comes from: a run folder's paired-op tables, in bounded memory.

In order of preference:

* ``history.parquet`` when it is a current copy of ``history.jsonl``
  (``history.parquet.parquet_is_current``; a run writes it as it goes, and
  ``kchaos analyze`` converts when it is not): the digest's columns a slice of
  row groups at a time, the nemesis ops' values only from the row groups
  that hold any;
* else ``history.jsonl`` converted block by block in memory
  (``history.convert.history_tables``), nothing written;
* else (a history the columnar path does not read: a corrupt line, a value of
  an odd shape) op by op, leaving out what the history contract cannot read,
  and saying so in a note.

Nothing here raises for a broken history: the problem becomes a note.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from history.convert import Unsupported, history_tables
from history.ops import HistoryFormatError, read_history
from history.paired import PARQUET_SCHEMA
from history.parquet import parquet_is_current

from .columns import indices
from .digest import COLUMNS, NEMESIS_COLUMNS, Digest, ExtraColumns, digest_tables
from .op_tables import paired_tables

log = logging.getLogger(__name__)

SLICE_ROWS = 1 << 20        # paired ops read at a time from history.parquet
_DICTIONARY = ("role", "type", "f")   # few values: read as dictionaries, compared by index


def parquet_tables(path: Path, slice_rows: int = SLICE_ROWS) -> Iterator[tuple[pa.Table, ExtraColumns]]:
    """history.parquet's COLUMNS, about ``slice_rows`` rows at a time, each
    slice with a reader of NEMESIS_COLUMNS for the rows asked (only their row
    groups are read). The next slice is read (pyarrow decodes outside the GIL)
    while the caller digests this one."""
    f = pq.ParquetFile(path, read_dictionary=_DICTIONARY)
    meta = f.metadata
    present = set(f.schema_arrow.names)
    columns = [c for c in COLUMNS if c in present]
    slices: list[list[int]] = []
    rows = slice_rows
    for g in range(meta.num_row_groups):
        if rows + meta.row_group(g).num_rows > slice_rows and (not slices or slices[-1]):
            slices.append([])
            rows = 0
        slices[-1].append(g)
        rows += meta.row_group(g).num_rows

    def read(groups: list[int]) -> pa.Table:
        table = f.read_row_groups(groups, columns=columns)
        for c in COLUMNS:
            if c not in present:        # a history.parquet of an older schema
                table = table.append_column(c, pa.nulls(table.num_rows, PARQUET_SCHEMA.field(c).type))
        return table

    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-report-read") as pool:
        ahead = pool.submit(read, slices[0]) if slices else None
        for k, groups in enumerate(slices):
            table = ahead.result()
            ahead = pool.submit(read, slices[k + 1]) if k + 1 < len(slices) else None
            starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in groups])
            yield table, _extra_reader(f, groups, starts)


def _extra_reader(f: pq.ParquetFile, groups: list[int], starts: np.ndarray) -> ExtraColumns:
    def extra(rows: np.ndarray) -> pa.Table:
        where = np.searchsorted(starts, rows, side="right") - 1
        pieces = []
        for g in np.unique(where).tolist():
            t = f.read_row_group(groups[g], columns=list(NEMESIS_COLUMNS))
            pieces.append(t.take(indices(rows[where == g] - starts[g])))
        return pa.concat_tables(pieces)
    return extra


def _ops(path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    """The ops of a history up to a corrupt line, the corrupt line said in a note."""
    n = 0
    try:
        for op in read_history(path):
            n += 1
            yield op
    except HistoryFormatError as e:
        notes.append(f"The history could not be read past a corrupt line ({e}); {n} ops before it are shown.")
    except OSError as e:
        notes.append(f"The history could not be read: {e}")


def run_digest(run_dir: Path) -> tuple[Digest, list[str]]:
    """The digest of a run folder's history, and notes on what of it could not be read."""
    jsonl, parquet = Path(run_dir) / "history.jsonl", Path(run_dir) / "history.parquet"
    if parquet_is_current(jsonl, parquet):
        try:
            return digest_tables(parquet_tables(parquet)), []
        except (OSError, pa.ArrowException, KeyError) as e:
            log.warning("%s could not be read (%s); reading %s instead", parquet, e, jsonl.name)
    try:
        return digest_tables(history_tables(jsonl)), []
    except (Unsupported, HistoryFormatError) as e:
        log.info("%s: read op by op (%s)", jsonl, e)
    except OSError as e:
        return Digest(), [f"The history could not be read: {e}"]
    notes: list[str] = []
    return digest_tables(paired_tables(_ops(jsonl, notes), notes)), notes
