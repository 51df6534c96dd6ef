"""Op statistics and unclean elections on Spark (definitions: reference.py)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import Finding, Witness

NS = 1_000_000_000


def op_stats(ops: DataFrame) -> dict[int, dict[str, Any]]:
    """Everything counted per op, in one pass over the ops: counts by f and
    type, availability per second, drain status, mode, any ok send."""
    client = F.col("role") == "client"
    second = F.when(client & F.col("time").isNotNull(), F.floor(F.col("time") / NS)).cast("long")
    rows = (ops.groupBy("run", "f", "type", client.alias("client"),
                           F.coalesce("drain", F.lit(False)).alias("drain"), second.alias("s"))
            .count().collect())
    out: dict[int, dict[str, Any]] = defaultdict(lambda: {
        "ops": {}, "avail": defaultdict(int), "has_ok_send": False, "mode": "assign",
        "drains": 0, "drains_ok": 0})
    for r in rows:
        d, n = out[r["run"]], r["count"]
        d["ops"].setdefault(r["f"], {"ok": 0, "fail": 0, "info": 0})[r["type"]] += n
        if r["s"] is not None:
            d["avail"][(r["s"], r["type"])] += n
        if r["client"] and r["f"] == "send" and r["type"] == "ok":
            d["has_ok_send"] = True
        if r["f"] == "subscribe":
            d["mode"] = "subscribe"
        if r["client"] and r["f"] == "poll" and r["drain"]:
            d["drains"] += n
            d["drains_ok"] += n if r["type"] == "ok" else 0
    return dict(out)


def elections(ops: DataFrame) -> list[dict[str, Any]]:
    """Unclean elections, as reference.elections defines them, from the samples."""
    s = (ops.filter((F.col("role") == "sampler") & F.col("sample").isNotNull())
         .select("run", F.col("invoke_index").alias("id"), "index", "time", F.explode("sample").alias("s"))
         .select("run", "id", "index", "time", "s.*"))
    w = Window.partitionBy("run", "partition").orderBy("id")
    s = (s.withColumn("prev_isr", F.lag("isr").over(w)).withColumn("prev_id", F.lag("id").over(w))
         .withColumn("last_leader", F.last("leader", ignorenulls=True).over(
             w.rowsBetween(Window.unboundedPreceding, -1))))
    prev_isr = F.coalesce("prev_isr", F.array().cast("array<int>"))
    cond = (F.col("leader").isNotNull() & F.col("last_leader").isNotNull()
            & (F.col("leader") != F.col("last_leader")) & (F.size(prev_isr) > 0)
            & ~F.array_contains(prev_isr, F.col("leader")))
    return [r.asDict(recursive=True) for r in s.filter(cond).collect()]


def election_findings(found: list[dict[str, Any]], attributed: dict[tuple, int], k: int
                      ) -> tuple[dict[int, Finding], dict[int, list[dict[str, Any]]]]:
    """Findings and results.json entries per run; ``attributed`` maps
    (run, partition, election index, "lost" | "inc") to counts."""
    findings: dict[int, list[tuple]] = defaultdict(list)
    lists: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in found:
        key = (e["run"], e["partition"], e["index"])
        entry = {"partition": e["partition"], "time": e["time"], "index": e["index"],
                 "from_leader": e["last_leader"], "to_leader": e["leader"], "epoch": e["epoch"],
                 "last_isr": list(e["prev_isr"]), "lost_writes": attributed.get((*key, "lost"), 0),
                 "inconsistent_offsets": attributed.get((*key, "inc"), 0)}
        lists[e["run"]].append(entry)
        extra = {x: entry[x] for x in ("from_leader", "to_leader", "epoch", "last_isr",
                                       "lost_writes", "inconsistent_offsets")}
        findings[e["run"]].append(((e["partition"], e["index"]),
                                   Witness(e["partition"], [], [], [e["prev_id"], e["id"]],
                                           extra=extra)))
    out = {}
    for run, items in findings.items():
        items.sort(key=lambda kw: kw[0])
        out[run] = Finding(count=len(items), witnesses=[w for _, w in items[:k]])
        lists[run].sort(key=lambda e: (e["partition"], e["index"]))
    return out, dict(lists)
