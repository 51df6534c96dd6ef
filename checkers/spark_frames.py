"""The Spark engine's passes over history.parquet.

* ``op_stats`` (spark_stats.py): one aggregation over the ops.
* ``control``: the few rows the driver needs whole: nemesis and sampler ops,
  assign/subscribe ops (chain resets), drain polls (is the drain complete).
* ``messages`` -> ``applyInArrow``: the messages of every client send and ok
  poll, one row per (op, partition), grouped by (run, partition): one shuffle,
  then one vectorised pass per Kafka partition (spark_partition.py). Output is small: counts, the first
  witnesses, lag samples.
* ``witness_ops``: the ops the witnesses name, by id (row groups pruned by the
  id filter: the file is written in history order).

A ``run`` column lets one pass check many histories (tests do); a single
history is run 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .spark_partition import (DRAIN_READ_OP, FAIL_SEND_OP, INFO_SEND_OP, OK_SEND_OP, OUT_DDL, READ_OP,
                              TXN_FAIL_OP, TXN_INFO_OP, TXN_OK_OP, TXN_OK_READ_OP, TXN_READ_OP, Context,
                              analyze_group)



def _client() -> Any:
    return F.col("role") == "client"


NO_MESSAGES = ["run", "invoke_index", "index", "invoke_time", "time", "process", "role", "type", "f",
               "drain", "error", "node", "producer", "isolation", "group", "partitions", "sample", "controller",
               "fault", "value"]


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


def control(ops: DataFrame) -> list[dict[str, Any]]:
    """Non-client ops in full; assign/subscribe and drain polls without values
    (a drain poll's value is a large JSON of everything it read)."""
    client = _client()
    wanted = ~client | F.col("f").isin("assign", "subscribe") | F.coalesce(F.col("drain"), F.lit(False))
    cols = [F.when(~client, F.col(c)).alias(c) if c in ("value", "sample") else F.col(c) for c in NO_MESSAGES]
    return [r.asDict(recursive=True) for r in ops.filter(wanted).select(*cols).collect()]


def messages(ops: DataFrame) -> DataFrame:
    """One row per (op, partition) of client sends and ok polls, the offsets and
    values of that partition's messages as lists: op fields are not repeated per
    message, which is most of the cost of shipping rows to Python. The writer
    records where each partition's run of messages starts (``partition_starts``),
    so an op is cut into its partitions with slices; an op whose messages are
    not grouped by partition (rare) is split one message a row. ``pos0``: the
    position in the op of the row's first message."""
    is_send, is_txn, typ = F.col("f") == "send", F.col("f") == "txn", F.col("type")
    if "partition_starts" not in ops.columns:
        ops = ops.withColumn("partition_starts", F.lit(None).cast("array<int>"))
    src = ops.filter(_client() & (is_send | is_txn | ((F.col("f") == "poll") & (typ == "ok")))
                     & (F.size("messages") > 0))
    op_kind = (F.when(is_txn, F.when(typ == "ok", F.lit(TXN_OK_OP)).when(typ == "fail", F.lit(TXN_FAIL_OP))
                      .otherwise(F.lit(TXN_INFO_OP)))
               .when(~is_send & F.coalesce(F.col("drain"), F.lit(False)), F.lit(DRAIN_READ_OP))
               .when(~is_send, F.lit(READ_OP))
               .when(typ == "ok", F.lit(OK_SEND_OP))
               .when(typ == "fail", F.lit(FAIL_SEND_OP))
               .otherwise(F.lit(INFO_SEND_OP)))
    rc = F.coalesce(F.col("isolation"), F.lit("read_committed")) != "read_uncommitted"   # txn.read_committed
    cols = ["run", F.col("invoke_index").alias("id"), F.col("process").cast("int").alias("process"), "producer"]
    times = [rc.alias("rc"), F.col("invoke_time").alias("t_inv"), F.col("time").alias("t_done")]
    src = src.select(*cols, op_kind.cast("byte").alias("kind"), *times, "messages", "partitions",
                     "partition_starts")
    # a txn's reads (of any type: they happened), one message a row as below
    reads = ops.filter(_client() & is_txn & (F.size("reads") > 0)).select(
        *cols, F.when(typ == "ok", F.lit(TXN_OK_READ_OP)).otherwise(F.lit(TXN_READ_OP)).cast("byte").alias("kind"),
        *times, F.col("reads").alias("messages"), F.lit(None).cast("array<int>").alias("partitions"),
        F.lit(None).cast("array<int>").alias("partition_starts"))
    src = src.unionByName(reads)
    grouped = F.col("partition_starts").isNotNull() & (F.size("partition_starts") == F.size("partitions"))
    one = grouped & (F.size("partitions") == 1)

    def part(p: Any, pos0: Any, offsets: Any, values: Any) -> Any:
        return F.struct(p.alias("partition"), pos0.alias("pos0"), offsets.alias("offsets"), values.alias("values"))

    ends = F.concat(F.slice("partition_starts", 2, F.size("partition_starts")), F.array(F.size("messages")))
    offs, vals = F.col("messages.offset"), F.col("messages.value")
    parts = (F.when(one, F.array(part(F.col("partitions")[0], F.lit(0), offs, vals)))
             .when(grouped, F.transform(
                 F.arrays_zip(F.col("partitions").alias("p"), F.col("partition_starts").alias("s"), ends.alias("e")),
                 lambda z: part(z["p"], z["s"], F.slice(offs, z["s"] + 1, z["e"] - z["s"]),
                                F.slice(vals, z["s"] + 1, z["e"] - z["s"]))))
             .otherwise(F.transform("messages", lambda m, i: part(m["partition"], i, F.array(m["offset"]),
                                                                   F.array(m["value"])))))
    return (src.select("run", "id", "process", "producer", "kind", "rc", "t_inv", "t_done",
                       F.explode(parts).alias("g"))
            .filter(F.size("g.offsets") > 0)
            .select("run", "g.partition", "id", "process", "producer", "kind", "rc", "t_inv", "t_done", "g.pos0",
                    "g.offsets", "g.values"))


def partition_results(ops: DataFrame, ctx: Context) -> list[Any]:
    """The per-partition pass; returns its (small) output rows."""
    def fn(key: Any, table: Any) -> Any:
        return analyze_group(key, table, ctx)
    return messages(ops).groupBy("run", "partition").applyInArrow(fn, OUT_DDL).collect()


def witness_ops(ops: DataFrame, wanted: set[tuple[int, int]]) -> list[dict[str, Any]]:
    if not wanted:
        return []
    ids = sorted({i for _, i in wanted})
    rows = ops.filter(F.col("invoke_index").isin(ids)).select(*NO_MESSAGES).collect()
    return [d for d in (r.asDict(recursive=True) for r in rows) if (d["run"], d["invoke_index"]) in wanted]
