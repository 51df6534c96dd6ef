"""The Spark engine's passes over history.parquet and its message index.

The hot passes are Spark jobs whose tasks read with pyarrow (spark_scan.py
says why):

* ``control_pass``: one job reads a few narrow columns of every row group
  and gives the op statistics (counted per row group, summed on the driver:
  spark_stats.py) and, reading the rest of a row group's op columns only
  when it has any, the few rows the driver needs whole (nemesis and sampler
  ops, assign/subscribe ops: chain resets; drain polls without values: is
  the drain complete).
* ``partition_results``: one task per few Kafka partitions reads each
  partition's messages from the index (history.message_index) and runs every
  per-partition check on them (spark_partition.py), with the context the
  control rows gave. Output is small: counts, the first witnesses, lag
  samples.
* ``witness_ops``: the ops the witnesses name, by id, reading only the row
  groups whose footer id range can hold them.

``read_ops`` is the ops as a Spark DataFrame, for the transaction and group
passes (spark_txn.py, spark_groups.py), which run only when a history has
transactions or groups.

A ``run`` column lets one pass check many histories (tests do); a single
history is run 0.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .spark_partition import OUT_DDL, Context, analyze_group
from history.arrays import _bools, is_value
from .spark_scan import BLOB_DDL, Read, Slice, blob, deal, read_slices, scan, slots, tasks, unblob
from history.row_groups import Source, history_files
from .spark_stats import fold_stats, merge_counts, partial_counts


NO_MESSAGES = ("run", "invoke_index", "index", "invoke_time", "time", "process", "role", "type", "f",
               "drain", "error", "node", "producer", "isolation", "group", "partitions", "sample", "controller",
               "fault", "value")
COUNTED = ("run", "role", "f", "type", "drain", "time")     # what the op statistics read


def _ddl(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"array<{_ddl(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"`{f.name}`:{_ddl(f.type)}" for f in t) + ">"
    return {pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string", pa.bool_(): "boolean",
            pa.int8(): "tinyint", pa.int16(): "smallint", pa.float64(): "double"}[t]


def read_ops(spark: SparkSession, path: str) -> DataFrame:
    """The ops table; the schema comes from the file footer (pyarrow), which
    spares Spark a schema-inference job."""
    files = history_files(path)
    schema = pq.read_schema(files[0])
    df = spark.read.schema(", ".join(f"`{f.name}` {_ddl(f.type)}" for f in schema)).parquet(*map(str, files))
    if "run" not in df.columns:
        df = df.withColumn("run", F.lit(0).cast("int"))
    if "producer" not in df.columns:   # written before pipelined producers
        df = df.withColumn("producer", F.lit(None).cast("string"))
    for name, typ in (("isolation", "string"), ("group", "string"),     # written before transactions
                      ("reads", "array<struct<partition:int,offset:bigint,value:bigint>>")):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(typ))
    return df


def _control(groups: Iterator[tuple[int, Read]]) -> Iterator[pa.RecordBatch]:
    """A task's op counts ("counts", all its row groups') and the control
    rows of each row group that has any ("control", ``at`` its place), each
    an Arrow blob."""
    out: list[tuple[str, int, bytes]] = []
    counted = []
    for at, read in groups:
        t = read(COUNTED)
        other = ~is_value(t["role"], "client")
        wanted = other | is_value(t["f"], "assign", "subscribe") | _bools(t["drain"])
        counted.append(partial_counts(t))
        if wanted.any():         # the op columns not read yet, then every op column in NO_MESSAGES order
            rest = read(tuple(c for c in NO_MESSAGES if c not in COUNTED))
            ops = pa.table({c: t[c] if c in COUNTED else rest[c] for c in NO_MESSAGES})
            ctl, keep = ops.filter(pa.array(wanted)), other[wanted]
            # A drain poll's value is a large JSON of everything it read: nulled by a take, which
            # copies only the values kept (if_else kept every byte: 45 MB a 10-minute drain's group).
            kept = pa.array(np.arange(len(keep)), mask=~keep)
            for name in ("value", "sample"):
                ctl = ctl.set_column(ctl.schema.get_field_index(name), name, ctl[name].take(kept))
            out.append(("control", at, blob(ctl)))
        if len(out) >= 64:
            yield _rows(out)
            out = []
    if counted:
        out.append(("counts", -1, blob(merge_counts(counted))))
    if out:
        yield _rows(out)


def _rows(out: list[tuple[str, int, bytes]]) -> pa.RecordBatch:
    what, at, blobs = zip(*out)
    return pa.RecordBatch.from_arrays([pa.array(what), pa.array(at, pa.int32()), pa.array(blobs, pa.binary())],
                                      names=["what", "at", "blob"])


@dataclass
class Control:
    """The op statistics per run, and the control rows in history order."""
    stats: dict[int, dict[str, Any]]
    rows: list[dict[str, Any]]


def control_pass(spark: SparkSession, src: Source) -> Control:
    counts, control = [], []
    for r in scan(spark, src, _control, BLOB_DDL).collect():
        (counts if r["what"] == "counts" else control).append((r["at"], unblob(r["blob"])))
    rows = [row for _, t in counts for row in t.to_pylist()]
    ctl_rows = [row for _, t in sorted(control, key=lambda at_t: at_t[0]) for row in t.to_pylist()]
    return Control(fold_stats(rows), ctl_rows)


def _nothing(groups: list[int]) -> Iterator[pa.RecordBatch]:
    """A warm-up task's work: none. Defined here so that unpickling it in a
    Python worker imports this module and every module the passes use."""
    return iter(())


def warm_up(spark: SparkSession) -> None:
    """One job of a task per slot that does nothing: the session's first job
    pays for the JVM's planning and execution classes and for starting and
    importing a Python worker per slot (about 2 s of wall time on this machine
    kind, against 0.2 s for the next job), and the workers are then reused
    by the passes (``spark.python.worker.reuse``). Worth it only while
    something else is on the critical path (a conversion: checking.py)."""
    tasks(spark, [[] for _ in range(slots(spark))], _nothing, BLOB_DDL).collect()


def partition_results(spark: SparkSession, slices: dict[tuple[int, int | None], list[Slice]],
                      ctx: Context) -> list[Any]:
    """The per-partition pass over the message index; returns its (small)
    output rows. Partitions are dealt to two tasks per slot, largest first
    (a partition's checks take long enough to pay a task's set-up, and two
    per slot even out partitions of unequal size)."""
    def fn(keys: list[tuple[tuple[int, int | None], list[Slice]]]) -> Iterator[pa.RecordBatch]:
        files: dict[str, pq.ParquetFile] = {}
        for (run, part), where in keys:
            key = (pa.scalar(run, pa.int32()), pa.scalar(part, pa.int32()))
            yield from analyze_group(key, read_slices(where, files), ctx).to_batches()
    if not slices:
        return []
    n = min(len(slices), 2 * slots(spark))
    work = deal([(sum(s.bytes for s in where), (key, where)) for key, where in slices.items()], n)
    return tasks(spark, work, fn, OUT_DDL).collect()


def witness_ops(spark: SparkSession, src: Source, wanted: set[tuple[int, int]]) -> list[dict[str, Any]]:
    if not wanted:
        return []
    ids = sorted({i for _, i in wanted})

    def fn(groups: Iterator[tuple[int, Read]]) -> Iterator[pa.RecordBatch]:
        for at, read in groups:
            t = read(NO_MESSAGES)
            hit = t.filter(pc.is_in(t["invoke_index"], pa.array(ids, pa.int64())))
            if hit.num_rows:
                yield pa.RecordBatch.from_arrays([pa.array(["ops"]), pa.array([at], pa.int32()),
                                                  pa.array([blob(hit)], pa.binary())], names=["what", "at", "blob"])

    def holds(g: Any) -> bool:      # some wanted id within the row group's footer range
        return g.lo is None or bisect.bisect_left(ids, g.lo) < bisect.bisect_right(ids, g.hi)
    rows = [d for r in scan(spark, src, fn, BLOB_DDL, keep=holds).collect()
            for d in unblob(r["blob"]).to_pylist()]
    return [d for d in rows if (d["run"], d["invoke_index"]) in wanted]
