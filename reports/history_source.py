"""Where the report's history comes from: a run folder's paired-op tables, in bounded memory.

In order of preference:

* ``history.parquet`` when it is a current copy of ``history.jsonl``
  (``history.parquet.parquet_is_current``; a run writes it as it goes, and
  ``kchaos analyze`` converts when it is not): the digest's columns a slice of
  row groups at a time, the nemesis ops' values and the samples only from the
  row groups that hold any; the messages from the message index beside it when that is
  current (``reports.digest_messages.index_plan``), else from the nested
  messages column;
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
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from history.convert import Unsupported, history_tables
from history.ops import HistoryFormatError, read_history
from history.paired import PARQUET_SCHEMA
from history.parquet import parquet_is_current
from history.row_groups import index_path

from .columns import indices
from .digest import COLUMNS, Digest, DigestBuilder, ExtraColumns, digest_tables
from .digest_messages import index_plan
from .op_tables import paired_tables

log = logging.getLogger(__name__)

# paired ops read at a time from history.parquet: small enough that the digest's temporaries are reused
# rather than mapped anew (1 << 20 took three times the page faults on a 36M-op history)
SLICE_ROWS = 1 << 18
_DICTIONARY = ("role", "type", "f")   # few values: read as dictionaries, compared by index


def parquet_tables(path: Path, slice_rows: int = SLICE_ROWS, messages: bool = True,
                   metadata: pq.FileMetaData | None = None) -> Iterator[tuple[pa.Table, ExtraColumns]]:
    """history.parquet's COLUMNS (but "messages" when not ``messages``),
    about ``slice_rows`` rows at a time, each slice with a reader of other
    columns (NEMESIS_COLUMNS, SAMPLE_COLUMNS) for the rows asked (only their
    row groups are read). The next slice is read (pyarrow decodes outside the
    GIL) while the caller digests this one. ``metadata``: its footer, when
    read already (a long history's takes a fifth of a second to parse)."""
    f = pq.ParquetFile(path, read_dictionary=_DICTIONARY, metadata=metadata)
    meta = f.metadata
    present = set(f.schema_arrow.names)
    wanted = [c for c in COLUMNS if messages or c != "messages"]
    columns = [c for c in wanted if c in present]
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
        for c in wanted:
            if c not in present:        # a history.parquet of an older schema
                table = table.append_column(c, pa.nulls(table.num_rows, PARQUET_SCHEMA.field(c).type))
        return table

    # the caller's reads of other columns go through a reader of its own: a ParquetFile is not safe
    # to read from two threads at once (the read-ahead's and the caller's)
    mine = pq.ParquetFile(path, metadata=meta)
    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-report-read") as pool:
        ahead = pool.submit(read, slices[0]) if slices else None
        for k, groups in enumerate(slices):
            table = ahead.result()
            ahead = pool.submit(read, slices[k + 1]) if k + 1 < len(slices) else None
            starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in groups])
            yield table, _extra_reader(mine, present, groups, starts)


def _extra_reader(f: pq.ParquetFile, present: set[str], groups: list[int], starts: np.ndarray) -> ExtraColumns:
    def extra(rows: np.ndarray, names: Sequence[str]) -> pa.Table:
        where = np.searchsorted(starts, rows, side="right") - 1
        pieces = []
        for g in np.unique(where).tolist():
            t = f.read_row_group(groups[g], columns=[c for c in names if c in present])
            for c in names:
                if c not in present:        # a history.parquet of an older schema
                    t = t.append_column(c, pa.nulls(t.num_rows, PARQUET_SCHEMA.field(c).type))
            pieces.append(t.select(list(names)).take(indices(rows[where == g] - starts[g])))
        return pa.concat_tables(pieces)
    return extra


def parquet_digest(path: Path, slice_rows: int = SLICE_ROWS, use_index: bool = True) -> Digest:
    """The digest of a history.parquet: its messages from its message index
    when that may be read (``index_plan``; not with ``use_index`` False),
    the rest from history.parquet's narrow columns; else all from
    history.parquet. Both give the same digest; the index's way reads no
    nested column and holds one partition's messages at a time."""
    plan = index_plan(path, index_path(path)) if use_index else None
    meta = pq.read_metadata(path)
    b = DigestBuilder(index_path(path), plan, rows=meta.num_rows)
    for t, extra in parquet_tables(path, slice_rows, messages=plan is None, metadata=meta):
        b.add(t, extra)
    return b.finish()


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
            return parquet_digest(parquet), []
        except (OSError, pa.ArrowException, KeyError) as e:
            log.warning("%s or its message index could not be read (%s); reading it without the index", parquet, e)
        try:
            return parquet_digest(parquet, use_index=False), []
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
