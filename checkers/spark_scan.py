"""Passes over history.parquet as Spark tasks of whole row groups, read with pyarrow.

Why not Spark's Parquet reader and row engine for the hot passes: every check
wants a Kafka partition's messages as numpy arrays, and through Spark's rows
each nested message is converted (Parquet -> rows -> explode -> shuffle ->
sort -> Arrow) one element at a time. Measured on this machine kind (2 cores,
1M ops, 1.5M messages, warm): that formulation 5-6 s for the per-partition
pass, this one about 2.5 s; cold, the gap is larger, because little JVM code runs
(``bench/checker_throughput.py`` keeps the figures). Spark still schedules
the tasks, shuffles each task's per-partition pieces to the task that checks
that partition, and runs on a standalone cluster unchanged: like
``spark.read.parquet`` of a local path, the file must be at the same path on
every worker.

* ``Source``: the files, their row groups and what their footers say.
* ``scan``: a DataFrame whose tasks each read some row groups (all columns
  they need, missing ones as nulls) and yield Arrow batches.
* ``flatten``: one row per message of client sends, txns and ok polls, and of
  txn reads, with the op fields each check needs (``MESSAGE_SCHEMA``).
* ``pieces``: a task's messages cut by (run, partition) into Arrow IPC
  blobs (zstd), glued back on the other side of the shuffle (spark_frames).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .model import PARQUET_SCHEMA
from .spark_partition import (DRAIN_READ_OP, FAIL_SEND_OP, INFO_SEND_OP, OK_SEND_OP, READ_OP, TXN_FAIL_OP,
                              TXN_INFO_OP, TXN_OK_OP, TXN_OK_READ_OP, TXN_READ_OP, _bools)

MESSAGE_SCHEMA = pa.schema([
    ("run", pa.int32()), ("partition", pa.int32()), ("id", pa.int64()), ("pos", pa.int32()),
    ("process", pa.int64()), ("producer", pa.string()), ("kind", pa.int8()), ("rc", pa.bool_()),
    ("t_inv", pa.int64()), ("t_done", pa.int64()), ("offset", pa.int64()), ("value", pa.int64()),
])
PIECES_DDL = "run int, partition int, blob binary"
BLOB_DDL = "what string, at int, blob binary"   # at: the row group's place in Source.groups
MESSAGE_COLUMNS = ("run", "invoke_index", "invoke_time", "time", "process", "role", "type", "f", "drain",
                   "producer", "isolation", "messages", "reads")
PIECE_BYTES = 8 << 20      # uncompressed bytes of a piece at most (a row on the JVM heap on its way)
_TYPES = {f.name: f.type for f in PARQUET_SCHEMA} | {"run": pa.int32()}


@dataclass(frozen=True)
class Group:
    file: str
    index: int
    rows: int
    bytes: int
    lo: int | None     # invoke_index bounds from the footer (None: no statistics)
    hi: int | None


@dataclass(frozen=True)
class Source:
    groups: tuple[Group, ...]

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)


def source(path: str | Path) -> Source:
    """The row groups of a history.parquet (a file, or a folder of them)."""
    p = Path(path)
    files = sorted(p.rglob("*.parquet")) if p.is_dir() else [p]
    groups = []
    for f in files:
        meta = pq.read_metadata(f)
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        col = names.index("invoke_index") if "invoke_index" in names else None
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            stats = rg.column(col).statistics if col is not None else None
            has = stats is not None and stats.has_min_max
            groups.append(Group(str(f.resolve()), i, rg.num_rows, rg.total_byte_size,
                                int(stats.min) if has else None, int(stats.max) if has else None))
    return Source(tuple(groups))


def parallelism(spark: Any) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return 4


def read_group(group: Group, columns: tuple[str, ...], files: dict[str, pq.ParquetFile]) -> pa.Table:
    """One row group's ``columns``; a column the file lacks (older histories;
    ``run`` in a single history) comes as nulls, ``run`` as 0."""
    f = files.get(group.file)
    if f is None:
        f = files[group.file] = pq.ParquetFile(group.file)
    present = set(f.schema_arrow.names)
    t = f.read_row_group(group.index, columns=[c for c in columns if c in present])
    for c in columns:
        if c not in present:
            col = pa.array(np.zeros(t.num_rows, np.int32)) if c == "run" else pa.nulls(t.num_rows, _TYPES[c])
            t = t.append_column(c, col)
    return t.select(list(columns))


def scan(spark: Any, src: Source, columns: tuple[str, ...],
         fn: Callable[[Iterator[tuple[int, pa.Table]]], Iterator[Any]],
         ddl: str, keep: Callable[[Group], bool] | None = None) -> Any:
    """A DataFrame (schema ``ddl``) of what ``fn`` yields (Arrow record
    batches) for the (place in ``src.groups``, table) of each task's row groups. Row groups are dealt
    to at most twice the parallelism's tasks, largest first, each to the
    least loaded task."""
    groups = [(i, g) for i, g in enumerate(src.groups) if keep is None or keep(g)]
    n = max(1, min(len(groups), 2 * parallelism(spark)))
    tasks: list[list[tuple[int, Group]]] = [[] for _ in range(n)]
    load = [0] * n
    for at, g in sorted(groups, key=lambda ig: -ig[1].bytes):
        i = load.index(min(load))
        tasks[i].append((at, g))
        load[i] += g.bytes
    for t in tasks:
        t.sort()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files: dict[str, pq.ParquetFile] = {}
        for b in batches:
            for task in b.column(0).to_pylist():
                yield from fn((at, read_group(g, columns, files)) for at, g in tasks[task])

    return spark.range(0, n, 1, n).mapInArrow(run, ddl)


def flatten(t: pa.Table) -> pa.Table:
    """Every message of client sends, txns and ok polls (a txn's reads too),
    one row each (``MESSAGE_SCHEMA``); ``pos`` is its place in its op's list."""
    t = t.combine_chunks()
    client, f, typ = _bools(pc.equal(t["role"], "client")), t["f"], t["type"]
    send, txn, poll = (_bools(pc.equal(f, x)) & client for x in ("send", "txn", "poll"))
    ok, fail = _bools(pc.equal(typ, "ok")), _bools(pc.equal(typ, "fail"))
    drain = _bools(t["drain"])
    kind = np.full(t.num_rows, -1, np.int8)
    kind[send] = np.where(ok[send], OK_SEND_OP, np.where(fail[send], FAIL_SEND_OP, INFO_SEND_OP))
    kind[txn] = np.where(ok[txn], TXN_OK_OP, np.where(fail[txn], TXN_FAIL_OP, TXN_INFO_OP))
    kind[poll & ok] = np.where(drain[poll & ok], DRAIN_READ_OP, READ_OP)
    read_kind = np.where(txn, np.where(ok, TXN_OK_READ_OP, TXN_READ_OP), -1).astype(np.int8)
    rc = _bools(pc.not_equal(pc.fill_null(t["isolation"], "read_committed"), "read_uncommitted"))
    parts = []
    for name, kinds in (("messages", kind), ("reads", read_kind)):
        rows = np.flatnonzero(kinds >= 0)
        if not len(rows):
            continue
        lists = t[name].chunk(0).take(pa.array(rows))
        msgs = lists.flatten()
        if not len(msgs):
            continue
        parent = rows[pc.list_parent_indices(lists).to_numpy()]
        offs = lists.offsets.to_numpy()
        pos = np.arange(len(msgs)) - np.repeat(offs[:-1] - offs[0], np.diff(offs))
        at = pa.array(parent)
        parts.append(pa.Table.from_arrays([
            t["run"].take(at), msgs.field("partition"), t["invoke_index"].take(at), pa.array(pos, pa.int32()),
            pc.cast(t["process"].take(at), pa.int64()), t["producer"].take(at), pa.array(kinds[parent]),
            pa.array(rc[parent]), t["invoke_time"].take(at), t["time"].take(at),
            msgs.field("offset"), msgs.field("value")], schema=MESSAGE_SCHEMA))
    return pa.concat_tables(parts) if parts else MESSAGE_SCHEMA.empty_table()


_ZSTD = pa.ipc.IpcWriteOptions(compression="zstd")


def blob(t: pa.Table) -> bytes:
    """Arrow IPC, zstd: on 1M ops' messages 10 MB instead of 93, for 0.2 s of
    CPU, so the shuffle moves a tenth of the bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema, options=_ZSTD) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def unblob(b: Any) -> pa.Table:
    return pa.ipc.open_stream(b).read_all()


def pieces(tables: Iterator[tuple[int, pa.Table]]) -> Iterator[pa.RecordBatch]:
    """A task's messages, one IPC blob per (run, partition) (more when large)."""
    flat = pa.concat_tables([MESSAGE_SCHEMA.empty_table()] + [flatten(t) for _, t in tables]).combine_chunks()
    if not flat.num_rows:
        return
    flat = flat.sort_by([("run", "ascending"), ("partition", "ascending")])
    run, part = flat["run"].to_numpy(), pc.fill_null(flat["partition"], -2**31).to_numpy()
    cut = np.flatnonzero(np.r_[True, (run[1:] != run[:-1]) | (part[1:] != part[:-1])])
    ends = np.r_[cut[1:], len(run)]
    per_row = max(1, flat.nbytes // max(1, flat.num_rows))
    step = max(1, PIECE_BYTES // per_row)
    runs, parts, blobs = [], [], []
    for s, e in zip(cut, ends):
        for a in range(s, e, step):
            piece = flat.slice(a, min(step, e - a))
            runs.append(int(run[s]))
            parts.append(piece["partition"][0].as_py())
            blobs.append(blob(piece))
    yield pa.RecordBatch.from_arrays([pa.array(runs, pa.int32()), pa.array(parts, pa.int32()),
                                      pa.array(blobs, pa.binary())], names=["run", "partition", "blob"])
