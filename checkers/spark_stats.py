"""Op statistics on Spark (definitions: reference.py)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


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
        if r["f"] == "subscribe" and d["mode"] != "group":
            d["mode"] = "subscribe"
        if r["client"] and r["f"] == "rebalance":
            d["mode"] = "group"        # rebalances recorded: chains follow them (reference.RunIndex.mode)
        if r["client"] and r["f"] == "poll" and r["drain"]:
            d["drains"] += n
            d["drains_ok"] += n if r["type"] == "ok" else 0
    return dict(out)
