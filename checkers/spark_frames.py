"""The Spark engine's passes over history.parquet.

The hot passes are Spark jobs of row-group tasks read with pyarrow
(spark_scan.py says why):

* ``first_pass``: one job reads every row group once and gives the op
  statistics (counted per row group, summed on the driver: spark_stats.py),
  the few rows the driver needs whole (nemesis and sampler ops,
  assign/subscribe ops: chain resets; drain polls without values: is the
  drain complete), and each row group's messages cut by (run, partition) into
  pieces, which it keeps.
* ``partition_results``: one shuffle brings a Kafka partition's pieces
  together, then one vectorised pass per partition (spark_partition.py),
  with the context the control rows gave. Output is small: counts, the
  first witnesses, lag samples.
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
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from .spark_partition import OUT_DDL, Context, _bools, analyze_group, is_value
from .spark_scan import BLOB_DDL, Pieces, Source, blob, cut, parallelism, scan, unblob
from .spark_stats import fold_stats, partial_counts


NO_MESSAGES = ("run", "invoke_index", "index", "invoke_time", "time", "process", "role", "type", "f",
               "drain", "error", "node", "producer", "isolation", "group", "partitions", "sample", "controller",
               "fault", "value")


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
    p = Path(path)
    first = min(p.rglob("*.parquet")) if p.is_dir() else p
    schema = pq.read_schema(first)
    df = spark.read.schema(", ".join(f"`{f.name}` {_ddl(f.type)}" for f in schema)).parquet(str(path))
    if "run" not in df.columns:
        df = df.withColumn("run", F.lit(0).cast("int"))
    if "producer" not in df.columns:   # written before pipelined producers
        df = df.withColumn("producer", F.lit(None).cast("string"))
    for name, typ in (("isolation", "string"), ("group", "string"),     # written before transactions
                      ("reads", "array<struct<partition:int,offset:bigint,value:bigint>>")):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(typ))
    return df


FIRST_DDL = "what string, at int, run int, partition int, blob binary"


def _first(tables: Iterator[tuple[int, pa.Table]]) -> Iterator[pa.RecordBatch]:
    """Per row group: its op counts and control rows (what "counts",
    "control"; ``at`` its place), and its messages cut by (run, partition)
    into pieces (what "piece"). A row group whose messages cannot be cut
    gives an "error" row: the per-partition checks then say unknown."""
    held = Pieces()
    out: list[tuple[str, int | None, int | None, int | None, bytes]] = []
    for at, t in tables:
        other = ~is_value(t["role"], "client")
        wanted = other | is_value(t["f"], "assign", "subscribe") | _bools(t["drain"])
        ctl, keep = t.select(NO_MESSAGES).filter(pa.array(wanted)), pa.array(other[wanted])
        for name in ("value", "sample"):     # a drain poll's value is a large JSON of everything it read
            ctl = ctl.set_column(ctl.schema.get_field_index(name), name,
                                 pc.if_else(keep, ctl[name], pa.scalar(None, ctl.schema.field(name).type)))
        out += [("counts", at, None, None, blob(partial_counts(t))), ("control", at, None, None, blob(ctl))]
        try:
            for run, part, piece in cut(t):
                out += [("piece", None, *x) for x in held.add(run, part, piece)]
        except Exception as e:  # noqa: BLE001 - reported as unknown, never a pass
            out.append(("error", at, None, None, f"{type(e).__name__}: {e}".encode()))
        if len(out) >= 64:
            yield _rows(out)
            out = []
    out += [("piece", None, *x) for x in held.rest()]
    if out:
        yield _rows(out)


def _rows(out: list[tuple[str, int | None, int | None, int | None, bytes]]) -> pa.RecordBatch:
    what, at, run, part, blobs = zip(*out)
    return pa.RecordBatch.from_arrays([pa.array(what), pa.array(at, pa.int32()), pa.array(run, pa.int32()),
                                       pa.array(part, pa.int32()), pa.array(blobs, pa.binary())],
                                      names=["what", "at", "run", "partition", "blob"])


@dataclass
class FirstPass:
    """What one read of every row group gives: the op statistics per run, the
    control rows in history order, errors cutting messages, and the pieces,
    kept for the per-partition pass. ``close`` lets them go."""
    stats: dict[int, dict[str, Any]]
    control: list[dict[str, Any]]
    errors: list[str]
    kept: DataFrame

    @property
    def pieces(self) -> DataFrame:
        return self.kept.filter(F.col("what") == "piece")

    def close(self) -> None:
        self.kept.unpersist()


def first_pass(spark: SparkSession, src: Source) -> FirstPass:
    """One job reads each row group once (spark_frames doc). Its output is
    kept (persisted), so the per-partition pass, which needs the context the control
    rows give, does not read the file again."""
    df = scan(spark, src, NO_MESSAGES + ("messages", "reads"), _first, FIRST_DDL).persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        counts, control, errors = [], [], []
        for r in df.filter(F.col("what") != "piece").collect():
            if r["what"] == "error":
                errors.append(bytes(r["blob"]).decode())
            else:
                (counts if r["what"] == "counts" else control).append((r["at"], unblob(r["blob"])))
    except BaseException:
        df.unpersist()
        raise
    rows = [row for _, t in counts for row in t.to_pylist()]
    ctl_rows = [row for _, t in sorted(control, key=lambda at_t: at_t[0]) for row in t.to_pylist()]
    return FirstPass(fold_stats(rows), ctl_rows, errors, df)


def partition_results(spark: SparkSession, first: FirstPass, ctx: Context) -> list[Any]:
    """The per-partition pass; returns its (small) output rows. The pieces are
    hash-partitioned by (run, partition), so each Kafka partition's pieces
    meet in one task, which glues and checks them: no sort of the pieces on
    the JVM heap (groupBy would sort them first)."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        by_key: dict[tuple[Any, Any], list[pa.Table]] = {}
        for b in batches:
            runs, parts, blobs = b.column("run").to_pylist(), b.column("partition").to_pylist(), b.column("blob")
            for i, key in enumerate(zip(runs, parts)):
                by_key.setdefault(key, []).append(unblob(blobs[i].as_buffer()))
        for (run, part), tables in by_key.items():
            key = (pa.scalar(run, pa.int32()), pa.scalar(part, pa.int32()))
            yield from analyze_group(key, pa.concat_tables(tables), ctx).to_batches()
    if first.errors:
        raise RuntimeError(first.errors[0])
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    if n > 1:       # a task per two cores' worth of hash buckets: 8 Kafka partitions into 4 leave one empty
        n = max(n, 2 * parallelism(spark))
    return (first.pieces.select("run", "partition", "blob")
            .repartition(n, "run", "partition").mapInArrow(fn, OUT_DDL).collect())


def witness_ops(spark: SparkSession, src: Source, wanted: set[tuple[int, int]]) -> list[dict[str, Any]]:
    if not wanted:
        return []
    ids = sorted({i for _, i in wanted})

    def fn(tables: Iterator[tuple[int, pa.Table]]) -> Iterator[pa.RecordBatch]:
        for at, t in tables:
            hit = t.filter(pc.is_in(t["invoke_index"], pa.array(ids, pa.int64())))
            if hit.num_rows:
                yield pa.RecordBatch.from_arrays([pa.array(["ops"]), pa.array([at], pa.int32()),
                                                  pa.array([blob(hit)], pa.binary())], names=["what", "at", "blob"])

    def holds(g: Any) -> bool:      # some wanted id within the row group's footer range
        return g.lo is None or bisect.bisect_left(ids, g.lo) < bisect.bisect_right(ids, g.hi)
    rows = [d for r in scan(spark, src, NO_MESSAGES, fn, BLOB_DDL, keep=holds).collect()
            for d in unblob(r["blob"]).to_pylist()]
    return [d for d in rows if (d["run"], d["invoke_index"]) in wanted]
