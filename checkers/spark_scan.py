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
* ``read_group``: one row group's columns; the few-valued strings come as
  dictionaries (``is_value`` compares them by index).
* ``cut``: a row group's messages of client sends, txns and ok polls, and
  of txn reads, one row each with the op fields each check needs
  (``MESSAGE_SCHEMA``), cut by (run, partition).
* ``Pieces``: a task's cut messages gathered per (run, partition) into
  Arrow IPC blobs (zstd), glued back on the other side of the shuffle
  (spark_frames).
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
                              TXN_INFO_OP, TXN_OK_OP, TXN_OK_READ_OP, TXN_READ_OP, _bools, _np, is_value)

MESSAGE_SCHEMA = pa.schema([     # one Kafka partition's messages: no run or partition column
    ("id", pa.int64()), ("pos", pa.int32()),
    ("process", pa.int64()), ("producer", pa.string()), ("kind", pa.int8()), ("rc", pa.bool_()),
    ("t_inv", pa.int64()), ("t_done", pa.int64()), ("offset", pa.int64()), ("value", pa.int64()),
])
BLOB_DDL = "what string, at int, blob binary"   # at: the row group's place in Source.groups
_NO_PARTITION = -2**31
PIECE_BYTES = 8 << 20      # uncompressed bytes of a piece at most (a row on the JVM heap on its way)
# read as dictionaries: a few distinct values each; decoding them was most of a row group's read
DICTIONARY_COLUMNS = ("role", "type", "f", "producer", "isolation", "error", "node", "group", "fault")
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
        f = files[group.file] = pq.ParquetFile(group.file, read_dictionary=DICTIONARY_COLUMNS)
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


def cut(t: pa.Table) -> Iterator[tuple[int, int | None, pa.Table]]:
    """A row group's messages of client sends, txns and ok polls (a txn's
    reads too), one row each (``MESSAGE_SCHEMA``; ``pos`` is the message's
    place in its op's list), as (run, partition, table) per (run, partition).
    The rows are ordered by key before any column is gathered, so each column
    is gathered once."""
    t = t.combine_chunks()
    client, f, typ = is_value(t["role"], "client"), t["f"], t["type"]
    send, txn, poll = (is_value(f, x) & client for x in ("send", "txn", "poll"))
    ok, fail = is_value(typ, "ok"), is_value(typ, "fail")
    drain = _bools(t["drain"])
    kind = np.full(t.num_rows, -1, np.int8)
    kind[send] = np.where(ok[send], OK_SEND_OP, np.where(fail[send], FAIL_SEND_OP, INFO_SEND_OP))
    kind[txn] = np.where(ok[txn], TXN_OK_OP, np.where(fail[txn], TXN_FAIL_OP, TXN_INFO_OP))
    kind[poll & ok] = np.where(drain[poll & ok], DRAIN_READ_OP, READ_OP)
    read_kind = np.where(txn, np.where(ok, TXN_OK_READ_OP, TXN_READ_OP), -1).astype(np.int8)
    parents, positions, kinds, structs = [], [], [], []
    for name, of in (("messages", kind), ("reads", read_kind)):
        rows = np.flatnonzero(of >= 0)
        if not len(rows):
            continue
        lists = t[name].chunk(0).take(pa.array(rows))
        msgs = lists.flatten()
        if not len(msgs):
            continue
        parent = rows[pc.list_parent_indices(lists).to_numpy()]
        offs = lists.offsets.to_numpy()
        parents.append(parent)
        positions.append(np.arange(len(msgs)) - np.repeat(offs[:-1] - offs[0], np.diff(offs)))
        kinds.append(of[parent])
        structs.append(msgs)
    if not parents:
        return
    parent, pos, kinds_ = np.concatenate(parents), np.concatenate(positions), np.concatenate(kinds)
    msgs = pa.concat_arrays(structs) if len(structs) > 1 else structs[0]
    run = _np(t["run"])[parent].astype(np.int64)
    part = _np(msgs.field("partition"), _NO_PARTITION).astype(np.int64)
    code = (run - run.min()) * (part.max() - part.min() + 1) + (part - part.min())
    order = np.argsort(code.astype(np.int16) if code.max() < 2**15 else code, kind="stable")
    at, code = pa.array(parent[order]), code[order]
    rc = ~is_value(t["isolation"], "read_uncommitted")     # null: read_committed
    producer = t["producer"].take(at)
    flat = pa.Table.from_arrays([
        t["invoke_index"].take(at), pa.array(pos[order], pa.int32()), pc.cast(t["process"].take(at), pa.int64()),
        pc.cast(producer, pa.string()) if pa.types.is_dictionary(producer.type) else producer,
        pa.array(kinds_[order]), pa.array(rc[parent[order]]), t["invoke_time"].take(at), t["time"].take(at),
        msgs.field("offset").take(pa.array(order)), msgs.field("value").take(pa.array(order))],
        schema=MESSAGE_SCHEMA)
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    for s, e in zip(starts, np.r_[starts[1:], len(code)]):
        p = int(part[order[s]])
        yield int(run[order[s]]), None if p == _NO_PARTITION else p, flat.slice(s, e - s)


_ZSTD = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", -1))


def blob(t: pa.Table) -> bytes:
    """Arrow IPC, zstd at level -1: one Kafka partition's 1.9M messages (10M
    ops, 8 partitions) are 16 MB instead of 107, for 0.12 s of CPU to write
    and 0.05 s to read (level 1: 14 MB, 0.16 s and 0.10 s; lz4: 34 MB, and
    the persisted pieces no longer fitted the driver's 1 GB heap)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema, options=_ZSTD) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def unblob(b: Any) -> pa.Table:
    return pa.ipc.open_stream(b).read_all()


class Pieces:
    """A task's messages gathered per (run, partition) and let go as IPC
    blobs of at most ``PIECE_BYTES`` uncompressed (each is a row on the JVM
    heap on its way; a row group of long polls is split by rows)."""

    def __init__(self) -> None:
        self.held: dict[tuple[int, int | None], list[pa.Table]] = {}
        self.size: dict[tuple[int, int | None], int] = {}

    def add(self, run: int, partition: int | None, t: pa.Table) -> Iterator[tuple[int, int | None, bytes]]:
        key = (run, partition)
        step = max(1, PIECE_BYTES // max(1, t.nbytes // max(1, t.num_rows)))    # rows of at most PIECE_BYTES
        for a in range(0, t.num_rows, step):
            part = t.slice(a, step)
            if self.size.get(key, 0) + part.nbytes > PIECE_BYTES and key in self.held:
                yield self._take(key)
            self.held.setdefault(key, []).append(part)
            self.size[key] = self.size.get(key, 0) + part.nbytes

    def rest(self) -> Iterator[tuple[int, int | None, bytes]]:
        for key in list(self.held):
            yield self._take(key)

    def _take(self, key: tuple[int, int | None]) -> tuple[int, int | None, bytes]:
        tables = self.held.pop(key)
        del self.size[key]
        return key[0], key[1], blob(pa.concat_tables(tables).combine_chunks())
