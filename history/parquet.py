"""history.jsonl -> history.parquet, and reading either back as paired ops.

The Parquet file is one row per paired op (schema: ``model.PARQUET_SCHEMA``).
An optional ``run`` column (int32) lets several histories share one file; the
Spark engine checks each run separately in one pass.

A run's history.parquet is written as the run goes (``history.writer``); it
is current when its footer says it covers the JSONL byte for byte
(``JSONL_BYTES``). Otherwise (an interrupted run, an old run, a hand-written
history) ``history_to_parquet`` converts the JSONL, column by column
(``history.convert``) or, for what that cannot read, op by op. Every writer
of history.parquet is a ``PairedOpsWriter``, which writes the message index
beside it (``history.message_index``).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from history.convert import Unsupported, history_tables
from history.ops import read_history
from history.message_index import IndexWriter, index_path
from history.paired import PARQUET_SCHEMA, PairedOp, pair_ops

log = logging.getLogger(__name__)

ROW_GROUP = 50_000
# Dictionary encoding only for columns of few distinct values. pyarrow's default tries it on
# every column and, on unique int64s (op indexes, times), pays for a dictionary it then gives
# up: 40 row groups of the 10M-op bench history took about 1.4 s of CPU to write instead of
# 2.0 s, 66 MB instead of 76 MB, and read no slower (the message index does the same).
FEW_VALUED = ("run", "process", "role", "type", "f", "error", "node", "producer", "isolation", "group",
              "controller", "fault", "generation", "messages.list.element.partition", "partitions.list.element",
              "partition_starts.list.element", "reads.list.element.partition",
              "committed.list.element.partition", "revoked.list.element", "sample.list.element.partition",
              "sample.list.element.leader", "sample.list.element.isr.list.element")
JSONL_BYTES = b"kchaos-jsonl-bytes"    # footer key: size of the history.jsonl this file pairs


def _schema(with_run: bool) -> pa.Schema:
    return PARQUET_SCHEMA.insert(0, pa.field("run", pa.int32())) if with_run else PARQUET_SCHEMA


class PairedOpsWriter:
    """history.parquet and its message index (``messages.index_path``),
    written together: the index cuts each table as it is written. ``close``
    writes the history's footer, then the index's, which names the history's
    (``messages.footprint``); until then neither file reads as complete. The
    history is the record and the index only serves it: an index that fails
    is dropped with a warning (the Spark engine builds one when it needs it),
    and the history goes on."""

    def __init__(self, path: Path, schema: pa.Schema = PARQUET_SCHEMA):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._history = pq.ParquetWriter(self.path, schema, use_dictionary=list(FEW_VALUED))
        self._index: IndexWriter | None = IndexWriter(index_path(self.path))

    def write(self, table: pa.Table, row_group_size: int = ROW_GROUP) -> None:
        self._history.write_table(table, row_group_size=row_group_size)
        self._indexed(lambda index: index.add(table))

    def close(self, metadata: dict[bytes, bytes] | None = None) -> None:
        if metadata:
            self._history.add_key_value_metadata(metadata)
        self._history.close()
        self._indexed(lambda index: index.close(self.path))

    def _indexed(self, step: Callable[[IndexWriter], None]) -> None:
        if self._index is None:
            return
        try:
            step(self._index)
        except Exception as e:  # noqa: BLE001 - the history is kept; analysis builds the index
            log.warning("%s: message index not kept (%s: %s)", self.path, type(e).__name__, e)
            index, self._index = self._index, None
            try:
                index.discard()
            except Exception:  # noqa: BLE001
                pass

    def discard(self) -> None:
        """Close and remove both (an error while writing: nothing half-made stays)."""
        try:
            self._history.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            if self._index is not None:
                self._index.discard()
        finally:
            remove_columnar(self.path)


def remove_columnar(path: Path) -> None:
    """Remove a history.parquet and its message index."""
    Path(path).unlink(missing_ok=True)
    index_path(path).unlink(missing_ok=True)


def _replace(tmp: Path, final: Path) -> None:
    """Move a finished tmp history and its index into place, the index first
    (the index names the history by its footer, which a rename keeps)."""
    if index_path(tmp).exists():
        index_path(tmp).replace(index_path(final))
    else:
        index_path(final).unlink(missing_ok=True)
    tmp.replace(final)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".parquet") + ".tmp.parquet")


def write_parquet(runs: Iterable[tuple[int | None, Iterable[PairedOp]]], parquet_path: Path,
                  metadata: dict[bytes, bytes] | None = None) -> int:
    """Write paired ops of one run (run id None: no ``run`` column) or several."""
    runs = list(runs)
    with_run = not (len(runs) == 1 and runs[0][0] is None)
    schema = _schema(with_run)
    parquet_path = Path(parquet_path)
    tmp = _tmp(parquet_path)
    n = 0
    writer = PairedOpsWriter(tmp, schema)
    try:
        batch: list[dict] = []
        for run, ops in runs:
            for op in ops:
                row = op.to_row()
                if with_run:
                    row["run"] = run
                batch.append(row)
                if len(batch) >= ROW_GROUP:
                    writer.write(pa.Table.from_pylist(batch, schema=schema))
                    n += len(batch)
                    batch = []
        if batch or n == 0:
            writer.write(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
        writer.close(metadata)
    except BaseException:
        writer.discard()
        raise
    _replace(tmp, parquet_path)
    return n


def history_to_parquet(jsonl_path: Path, parquet_path: Path) -> int:
    """Convert a JSONL history; returns the number of paired ops written.
    The footer records the JSONL's size (``parquet_is_current``).

    Raises HistoryFormatError for a corrupt line other than a truncated last one.
    """
    jsonl_path, parquet_path = Path(jsonl_path), Path(parquet_path)
    size = jsonl_path.stat().st_size
    meta = {JSONL_BYTES: str(size).encode()}
    tmp = _tmp(parquet_path)
    n = 0
    writer = PairedOpsWriter(tmp)
    try:
        for table in history_tables(jsonl_path):      # block by block: bounded memory
            writer.write(table)
            n += table.num_rows
        if n == 0:
            writer.write(PARQUET_SCHEMA.empty_table())
        writer.close(meta)
    except Unsupported as e:
        log.info("%s: op-by-op conversion (%s)", jsonl_path, e)
        writer.discard()
        return write_parquet([(None, pair_ops(read_history(jsonl_path)))], parquet_path, meta)
    except BaseException:
        writer.discard()
        raise
    _replace(tmp, parquet_path)
    return n


def parquet_is_current(jsonl_path: Path, parquet_path: Path) -> bool:
    """True when ``parquet_path`` is a complete paired copy of ``jsonl_path`` as
    it is now: it has a footer (a run killed mid-write leaves none), the
    checkers' schema, and the JSONL size it was made from equals the file's."""
    try:
        meta = pq.read_metadata(parquet_path)
        schema = pq.read_schema(parquet_path)
    except (OSError, pa.ArrowException):
        return False
    recorded = (meta.metadata or {}).get(JSONL_BYTES)
    try:
        size = os.stat(jsonl_path).st_size
    except OSError:
        return False
    return (recorded is not None and recorded.decode() == str(size)
            and schema.remove_metadata().equals(PARQUET_SCHEMA))


def is_parquet(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        return True
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def read_paired_ops(path: Path) -> list[PairedOp]:
    """Paired ops of one history, from JSONL or from a one-run Parquet file."""
    path = Path(path)
    if not is_parquet(path):
        return list(pair_ops(read_history(path)))
    return [PairedOp.from_row(r) for r in iter_parquet_rows(path)]


def iter_parquet_rows(path: Path) -> Iterator[dict]:
    table = pq.read_table(path)
    for batch in table.to_batches(max_chunksize=ROW_GROUP):
        yield from batch.to_pylist()
