"""Committed offsets stay put, on Spark (definition: committed_offsets.py; the
witness order is the same).

Only runs whose history has ``offsets`` ops (the runner's reads of a group's
committed offsets) pay for anything; the others get a zero count without a
Spark job. For those: the samples exploded per (run, group, partition), each
paired with the one before it by a window; the changes joined with the
commits of their group that may have acted between the two reads (a commit
row per partition it may have committed, or one row of unknown partitions);
per change, whether a commit explains its new offset, or only one of unknown
offsets could.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Callable

from .committed_offsets import NO_OFFSET, OFFSET_TYPES, UNKNOWN_OFFSETS_STAT
from .common import Finding, Witness
from history.ops import COMMIT, OFFSET_SAMPLER, OFFSETS

log = logging.getLogger(__name__)

_OFFSETS_MAP = "map<string,bigint>"


def check_committed_offsets(ops: Callable[[], Any], acc: Any, k: int) -> dict[int, dict[str, int]]:
    """Fill the runs' phantom-commit findings (``acc``: spark._Runs); returns
    the undecidable changes by run, as stats. A crash marks only its type."""
    for run in acc.base:
        acc.found[run]["phantom-commit"] = Finding()
    runs = sorted(r for r, b in acc.base.items() if OFFSETS in b["ops"])
    if not runs:
        return {}
    try:
        return _check(ops(), runs, acc, k)
    except Exception as e:  # noqa: BLE001 - never a pass on a crash
        log.exception("committed offsets pass crashed")
        acc.fail(f"committed-offsets: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}",
                 OFFSET_TYPES, runs)
        return {}


def _check(df: Any, runs: list[int], acc: Any, k: int) -> dict[int, dict[str, int]]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    df = df.filter(F.col("run").isin(runs) & F.col("group").isNotNull())
    samples = (df.filter((F.col("role") == OFFSET_SAMPLER) & (F.col("f") == OFFSETS) & (F.col("type") == "ok"))
               .select("run", "group", F.col("invoke_index").alias("b_id"), F.col("invoke_time").alias("b_inv"),
                       F.col("time").alias("b_time"), F.explode(F.from_json("value", _OFFSETS_MAP)).alias("pk", "b"))
               .withColumn("p", F.col("pk").cast("int")))
    w = Window.partitionBy("run", "group", "p").orderBy("b_id")
    changes = (samples.select("*", F.lag("b_id").over(w).alias("a_id"), F.lag("b_inv").over(w).alias("a_inv"),
                              F.lag("b").over(w).alias("a"))
               .filter(F.col("a_id").isNotNull() & ~F.col("a").eqNullSafe(F.col("b"))))
    commits = df.filter((F.col("role") == "client") & (F.col("f") == COMMIT) & (F.col("type") != "fail"))
    cbase = ["run", "group", F.col("invoke_index").alias("c_id"), F.col("invoke_time").alias("c_inv"),
             F.col("time").alias("c_time"), F.col("type").alias("c_type")]
    ok = (commits.filter(F.col("type") == "ok")
          .select(*cbase, F.explode("committed").alias("c"))
          .select("run", "group", "c_id", "c_inv", "c_time", "c_type", F.col("c.partition").alias("c_p"),
                  F.col("c.offset").alias("c_off")))
    info = commits.filter(F.col("type") == "info").select(*cbase, F.from_json("value", _OFFSETS_MAP).alias("m"))
    asked = (info.filter(F.col("m").isNotNull())
             .select("run", "group", "c_id", "c_inv", "c_time", "c_type", F.explode("m").alias("pk", "c_off"))
             .select("run", "group", "c_id", "c_inv", "c_time", "c_type", F.col("pk").cast("int").alias("c_p"),
                     "c_off"))
    anyp = (info.filter(F.col("m").isNull())
            .select("run", "group", "c_id", "c_inv", "c_time", "c_type", F.lit(None).cast("int").alias("c_p"),
                    F.lit(None).cast("bigint").alias("c_off")))
    c = ok.unionByName(asked).unionByName(anyp).alias("c")
    ch = changes.alias("ch")
    cond = ((F.col("ch.run") == F.col("c.run")) & (F.col("ch.group") == F.col("c.group"))
            & (F.col("c.c_p").isNull() | (F.col("c.c_p") == F.col("ch.p")))
            & (F.col("c.c_inv") < F.col("ch.b_time"))
            & ((F.col("c.c_type") != "ok") | (F.col("c.c_time") > F.col("ch.a_inv"))))
    rows = (ch.join(c, cond, "left")
            .groupBy(F.col("ch.run").alias("run"), F.col("ch.group").alias("group"), F.col("ch.p").alias("p"),
                     "ch.a_id", "ch.b_id", "ch.a", "ch.b")
            .agg(F.max(F.coalesce(F.col("c.c_off") == F.col("ch.b"), F.lit(False))).alias("explained"),
                 F.max(F.col("c.c_id").isNotNull() & F.col("c.c_p").isNull()).alias("unknown"),
                 F.sort_array(F.collect_set("c.c_id")).alias("ids"))
            .filter(F.col("b").isNull() | ~F.col("explained"))
            .collect())
    stats: dict[int, dict[str, int]] = defaultdict(dict)
    items: dict[int, list[tuple[tuple, Witness]]] = defaultdict(list)
    for r in rows:
        a, b = r["a"], r["b"]
        if b is not None and r["unknown"]:
            stats[r["run"]][UNKNOWN_OFFSETS_STAT] = stats[r["run"]].get(UNKNOWN_OFFSETS_STAT, 0) + 1
            continue
        items[r["run"]].append(((r["p"], r["b_id"], r["group"]), Witness(
            r["p"], [NO_OFFSET if a is None else a, NO_OFFSET if b is None else b], [],
            [r["a_id"], r["b_id"], *r["ids"]], extra={"group": r["group"], "before": a, "after": b})))
    for run, found in items.items():
        found.sort(key=lambda kw: kw[0])
        acc.found[run]["phantom-commit"] = Finding(count=len(found), witnesses=[w for _, w in found[:k]])
    return dict(stats)
