"""Op statistics (definitions: reference.py): counted per row group on the
workers (``partial_counts``), summed on the driver (``fold_stats``)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.arrays import is_value

NS = 1_000_000_000
KEYS = ["run", "f", "type", "client", "drain", "s"]


def partial_counts(t: pa.Table) -> pa.Table:
    """Ops counted by (run, f, type, client, drain, second of completion)."""
    client = pa.array(is_value(t["role"], "client"))
    time = t["time"]
    second = pc.if_else(pc.and_(client, pc.is_valid(time)),
                        pa.array(np.floor_divide(np.asarray(pc.fill_null(time, 0).to_numpy(zero_copy_only=False)),
                                                 NS)), pa.scalar(None, pa.int64()))
    keys = pa.table({"run": t["run"], "f": t["f"], "type": t["type"], "client": client,
                     "drain": pc.fill_null(t["drain"], False), "s": second})
    return keys.group_by(KEYS, use_threads=False).aggregate([([], "count_all")]).rename_columns(KEYS + ["count"])


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary columns as plain strings (row groups' dictionaries differ)."""
    return pa.table({n: pc.cast(c, pa.string()) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(t.column_names, t.columns)})


def merge_counts(tables: list[pa.Table]) -> pa.Table:
    """Several row groups' ``partial_counts`` as one table of the same shape."""
    t = pa.concat_tables([_plain(t) for t in tables])
    return t.group_by(KEYS, use_threads=False).aggregate([("count", "sum")]).rename_columns(KEYS + ["count"])


def fold_stats(rows: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Everything counted per op, per run: counts by f and type, availability
    per second, drain status, mode, any ok send."""
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
            d["mode"] = "group"        # rebalances recorded: chains follow them (run_index.RunIndex.mode)
        if r["client"] and r["f"] == "poll" and r["drain"]:
            d["drains"] += n
            d["drains_ok"] += n if r["type"] == "ok" else 0
    return dict(out)
