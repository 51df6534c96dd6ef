"""Settling info txns on Spark (definitions: settle.py), before the partition
pass: the info txns and the reads of their values are few, so one join brings
them to the driver, where ``settle.settle`` decides as the reference does.
Likewise the writers of the values Kafka's record holds open (hanging.py)."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .settle import ABORTED, COMMITTED, MarkerOf, Settled, settle
from .txn import read_committed

if TYPE_CHECKING:
    from .spark_partition import Context


def settle_runs(ops: DataFrame, ctx: "Context", markers: dict[int, MarkerOf]) -> dict[int, dict[int, Settled]]:
    """run -> info txn id -> how it was settled; ``ctx.settled`` gets the ids
    settled committed and aborted, for the partition pass."""
    client = F.col("role") == "client"
    info = (ops.filter(client & (F.col("f") == "txn") & (F.col("type") == "info"))
            .select("run", "invoke_index", "messages").collect())
    if not info:
        return {}
    txns: dict[int, list[tuple[int, list]]] = defaultdict(list)
    keys = []
    for r in sorted(info, key=lambda r: (r["run"], r["invoke_index"])):
        writes = [(m["partition"], m["offset"], m["value"]) for m in r["messages"] or []]
        txns[r["run"]].append((r["invoke_index"], writes))
        keys += [(r["run"], p, v, r["invoke_index"]) for p, _, v in writes]
    readers: dict[int, dict[tuple[int, int], tuple[int, int]]] = defaultdict(dict)
    drained: dict[int, set[tuple[int, int]]] = defaultdict(set)
    if keys:
        spark = ops.sparkSession
        written = spark.createDataFrame(keys, "run int, partition int, value bigint, writer bigint")
        cols = ("run", F.col("invoke_index").alias("reader"), "isolation")
        polls = (ops.filter(client & (F.col("f") == "poll") & (F.col("type") == "ok"))
                 .select(*cols, F.coalesce(F.col("drain"), F.lit(False)).alias("drain"), F.explode("messages").alias("m")))
        txn_reads = (ops.filter(client & (F.col("f") == "txn") & F.col("reads").isNotNull())
                     .select(*cols, F.lit(False).alias("drain"), F.explode("reads").alias("m")))
        reads = polls.unionByName(txn_reads).select(
            "run", "reader", "isolation", "drain", F.col("m.partition").alias("partition"),
            F.col("m.offset").alias("offset"), F.col("m.value").alias("value"))
        for r in (reads.join(F.broadcast(written), ["run", "partition", "value"])
                  .filter(F.col("reader") != F.col("writer")).collect()):
            key = (r["partition"], r["value"])
            if r["drain"]:
                drained[r["run"]].add(key)
            if read_committed(r["isolation"]):
                mine = readers[r["run"]]
                mine[key] = min(mine.get(key, (r["reader"], r["offset"])), (r["reader"], r["offset"]))
    out: dict[int, dict[int, Settled]] = {}
    for run, ts in txns.items():
        out[run] = settle(ts, readers[run], drained[run], lambda p, run=run: (run, p) in ctx.drained,
                          markers.get(run))
        ids = {o: sorted(i for i, s in out[run].items() if s.outcome == o) for o in (COMMITTED, ABORTED)}
        if ids[COMMITTED] or ids[ABORTED]:
            ctx.settled[run] = (np.array(ids[COMMITTED], np.int64), np.array(ids[ABORTED], np.int64))
    return out


def effective_types(spark: Any, ctx: "Context") -> DataFrame | None:
    """(run, invoke_index, settled_type) of the settled txns, to join where a
    pass reads txn types (torn), or None when none was settled."""
    rows = [(run, int(i), t) for run, (ok, bad) in ctx.settled.items()
            for ids, t in ((ok, "ok"), (bad, "fail")) for i in ids]
    if not rows:
        return None
    return spark.createDataFrame(rows, "run int, invoke_index bigint, settled_type string")


def writers_of(ops: Callable[[], DataFrame],
               wanted: dict[int, set[tuple[int, int]]]) -> dict[int, dict[tuple[int, int], int]]:
    """run -> (partition, value) -> the first client send or txn that wrote it, for the wanted values
    (the records of open transactions: few, so one broadcast join)."""
    keys = [(run, p, v) for run, pvs in wanted.items() for p, v in pvs]
    if not keys:
        return {}
    df = ops()
    want = df.sparkSession.createDataFrame(keys, "run int, partition int, value bigint")
    sent = (df.filter((F.col("role") == "client") & F.col("f").isin("send", "txn"))
            .select("run", "invoke_index", F.explode("messages").alias("m"))
            .select("run", "invoke_index", F.col("m.partition").alias("partition"), F.col("m.value").alias("value")))
    out: dict[int, dict[tuple[int, int], int]] = defaultdict(dict)
    for r in sent.join(F.broadcast(want), ["run", "partition", "value"]).groupBy("run", "partition", "value") \
            .agg(F.min("invoke_index").alias("writer")).collect():
        out[r["run"]][(r["partition"], r["value"])] = int(r["writer"])
    return out

