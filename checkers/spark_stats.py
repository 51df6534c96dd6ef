"""Op statistics on Spark, and unclean elections per run (definitions: reference.py, elections.py)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .common import Finding, Witness
from .elections import Sample, unclean_elections
from .history import SAMPLER

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


def run_elections(control_rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Unclean elections per run, from the collected sampler rows."""
    samples: dict[int, list[Sample]] = defaultdict(list)
    for r in control_rows:
        if r["role"] == SAMPLER and r.get("sample") is not None:
            samples[r["run"]].append(Sample(r["invoke_index"], r["index"], r["time"],
                                            [(s["partition"], s["leader"], list(s["isr"] or []), s["epoch"])
                                             for s in r["sample"]]))
    return {run: unclean_elections(found) for run, found in samples.items()}


def election_findings(found_by_run: dict[int, list[dict[str, Any]]], attributed: dict[tuple, int], k: int
                      ) -> tuple[dict[int, Finding], dict[int, list[dict[str, Any]]]]:
    """Findings and results.json entries per run; ``attributed`` maps
    (run, partition, election index, "lost" | "inc") to counts."""
    findings: dict[int, list[tuple]] = defaultdict(list)
    lists: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run, e in ((run, e) for run, found in found_by_run.items() for e in found):
        key = (run, e["partition"], e["index"])
        entry = {x: e[x] for x in ("partition", "time", "index", "from_leader", "to_leader", "epoch",
                                   "last_isr")}
        entry.update(lost_writes=attributed.get((*key, "lost"), 0),
                     inconsistent_offsets=attributed.get((*key, "inc"), 0))
        lists[run].append(entry)
        extra = {x: entry[x] for x in ("from_leader", "to_leader", "epoch", "last_isr",
                                       "lost_writes", "inconsistent_offsets")}
        findings[run].append(((e["partition"], e["index"]), Witness(e["partition"], [], [], e["ids"], extra=extra)))
    out = {}
    for run, items in findings.items():
        items.sort(key=lambda kw: kw[0])
        out[run] = Finding(count=len(items), witnesses=[w for _, w in items[:k]])
        lists[run].sort(key=lambda e: (e["partition"], e["index"]))
    return out, dict(lists)
