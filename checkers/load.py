"""history.jsonl -> history.parquet, and reading either back as paired ops.

The Parquet file is one row per paired op (schema: ``model.PARQUET_SCHEMA``),
written in row groups as the history streams past so a long history never sits
in memory whole. An optional ``run`` column (int32) lets several histories
share one file; the Spark engine checks each run separately in one pass.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .history import read_history

from .model import PARQUET_SCHEMA, PairedOp, pair_ops

ROW_GROUP = 50_000


def _schema(with_run: bool) -> pa.Schema:
    return PARQUET_SCHEMA.insert(0, pa.field("run", pa.int32())) if with_run else PARQUET_SCHEMA


def write_parquet(runs: Iterable[tuple[int | None, Iterable[PairedOp]]], parquet_path: Path) -> int:
    """Write paired ops of one run (run id None: no ``run`` column) or several."""
    runs = list(runs)
    with_run = not (len(runs) == 1 and runs[0][0] is None)
    schema = _schema(with_run)
    parquet_path = Path(parquet_path)
    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = parquet_path.with_name(parquet_path.name + ".tmp")
    n = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        batch: list[dict] = []
        for run, ops in runs:
            for op in ops:
                row = op.to_row()
                if with_run:
                    row["run"] = run
                batch.append(row)
                if len(batch) >= ROW_GROUP:
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                    n += len(batch)
                    batch = []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    tmp.replace(parquet_path)
    return n


def history_to_parquet(jsonl_path: Path, parquet_path: Path) -> int:
    """Convert a JSONL history; returns the number of paired ops written.

    Raises HistoryFormatError for a corrupt line other than a truncated last one.
    """
    return write_parquet([(None, pair_ops(read_history(Path(jsonl_path))))], parquet_path)


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
