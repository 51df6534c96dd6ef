"""Transaction checks on Spark (definitions: checkers/txn.py).

Three places, none of which brings every op to the driver:

* per (run, partition), in the per-partition pass (spark_partition.py calls
  these functions on its ``PartitionLog``, where a txn's writes and reads are
  messages of their own kinds): aborted-read and precommitted-read (a txn
  write and the reads of its value are in one partition), the int-* checks (a
  txn's reads or writes of one partition, in micro-op order), and the ww/wr
  edges of the dependency graph, sent back as one compact row per partition;
* Spark SQL: torn-transaction, which needs a txn's writes across partitions
  (a join of txn writes with the drain's reads), counted per run, the first
  ``max_witnesses`` collected;
* the driver: the committed txns (id, process, times) and the edges go to
  ``txn.cycle_findings``, the same networkx search the reference runs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import SKIPPED_LIMIT, Finding, Settings, Witness
from history.message_index import ACK, OK_NO_OFFSET, TXN_ABORTED, TXN_OK_READ_OP
from .spark_arrays import _first_k, _groups
from .settle import MarkerOf, Settled
from .spark_settle import effective_types, settle_runs
from .txn import CYCLE_TYPES, READ_TYPES, TXN_TYPES, cycle_findings

if TYPE_CHECKING:
    from .spark import _Runs
    from .spark_partition import Context, PartitionLog

KIND_CODES = ("ww", "wr")
# what an unsettled info txn sways: every txn check, the offset checks of its writes and the poll chains
SETTLED_TYPES = TXN_TYPES + ("inconsistent-offset", "duplicate", "nonlinearizable-offset", "nonmonotonic-send",
                             "nonmonotonic-poll", "poll-skip", "unseen")


# -- per partition ---------------------------------------------------------------------
def _pairs(keys: np.ndarray, sorted_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (i, j) with keys[i] == sorted_vals[j]."""
    lo, hi = np.searchsorted(sorted_vals, keys, "left"), np.searchsorted(sorted_vals, keys, "right")
    n = hi - lo
    i = np.repeat(np.arange(len(keys)), n)
    j = np.repeat(lo, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return i, j.astype(np.int64)


def txn_reads(plog: "PartitionLog") -> None:
    """aborted-read and precommitted-read (txn.check_txn_reads)."""
    if not plog.txn_w.any():        # no txn wrote here: nothing to pair the reads with
        for typ in READ_TYPES:
            plog.out.count(typ, 0)
        return
    rm = plog.read & plog.rc
    order = np.argsort(plog.val[rm], kind="stable")
    rv, ro, rid, rtd = (a[rm][order] for a in (plog.val, plog.off, plog.ids, plog.t_done))
    wm = plog.txn_w
    wv, wid, wpos, wkind, winv = (a[wm] for a in (plog.val, plog.ids, plog.pos, plog.kind, plog.t_inv))
    wi, ri = _pairs(wv, rv)
    aborted = wkind[wi] == TXN_ABORTED
    early = (rid[ri] == wid[wi]) | ((rtd[ri] >= 0) & (rtd[ri] < winv[wi]))
    for typ, mask in zip(READ_TYPES, (aborted, ~aborted & early)):
        w, r = wi[mask], ri[mask]
        order = np.lexsort((r, w))
        w, r = w[order], r[order]
        s, _ = _groups([w])
        ws = w[s]
        first = np.minimum.reduceat(rid[r], s) if len(s) else np.zeros(0, np.int64)
        low = np.minimum.reduceat(ro[r], s) if len(s) else np.zeros(0, np.int64)
        plog.out.count(typ, len(ws))
        for g in _first_k([wv[ws], wid[ws], wpos[ws]], plog.k):
            x = ws[g]
            plog.out.witness(typ, [plog.p, wv[x], wid[x], wpos[x]], [low[g]], [wv[x]], [wid[x], first[g]])


def _successive(mask: np.ndarray, plog: "PartitionLog") -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (a, b) of successive entries of one op under ``mask``, by position."""
    idx = np.flatnonzero(mask)
    idx = idx[np.lexsort((plog.pos[idx], plog.ids[idx]))]
    same = plog.ids[idx][1:] == plog.ids[idx][:-1]
    return idx[:-1][same], idx[1:][same]


def txn_internal(plog: "PartitionLog") -> None:
    """int-nonmonotonic-poll, int-poll-skip, int-nonmonotonic-send, int-send-skip (txn.check_internal)."""
    off, val, ids, pos, p, k = plog.off, plog.val, plog.ids, plog.pos, plog.p, plog.k
    a, b = _successive(plog.read & plog.txn_r, plog)
    if len(a) and plog.ctx.rebalanced:
        keep = np.array([p not in plog.ctx.rebalanced.get((plog.run, int(i)), ()) for i in ids[b]], bool)
        a, b = a[keep], b[keep]
    rc = plog.rc[b]
    reads = (a, b, rc, "int-nonmonotonic-poll", "int-poll-skip")
    a2, b2 = _successive(plog.txn_w, plog)
    both = plog.has_off[a2] & plog.has_off[b2]
    writes = (a2[both], b2[both], np.zeros(int(both.sum()), bool), "int-nonmonotonic-send", "int-send-skip")
    for a, b, rc, back_t, skip_t in (reads, writes):
        lo = np.where(rc, np.searchsorted(plog.known_rc, off[a], "right"), np.searchsorted(plog.known, off[a], "right"))
        hi = np.where(rc, np.searchsorted(plog.known_rc, off[b]), np.searchsorted(plog.known, off[b]))
        back = off[b] <= off[a]
        gap = hi - lo
        for typ, mask in ((back_t, back), (skip_t, ~back & (gap > 0))):
            idx = np.flatnonzero(mask)
            plog.out.count(typ, len(idx))
            for i in idx[_first_k([ids[b][idx], pos[b][idx]], k)]:
                extra = None
                if typ == skip_t:
                    src = plog.known_rc if rc[i] else plog.known
                    extra = {"skipped": [int(x) for x in src[lo[i]: lo[i] + min(gap[i], SKIPPED_LIMIT)]],
                             "skipped_count": int(gap[i])}
                plog.out.witness(typ, [p, ids[b[i]], pos[b[i]]], [off[a[i]], off[b[i]]], [val[a[i]], val[b[i]]],
                                 [ids[b[i]]], extra=extra)


def txn_edges(plog: "PartitionLog") -> None:
    """ww and wr edges of this partition (txn.data_edges), as one row: ``blob``
    holds int64 (from, to, kind code, offset) per edge."""
    cm = plog.txn_w & ((plog.kind == ACK) | (plog.kind == OK_NO_OFFSET))      # committed txns' writes
    if not cm.any():                # no committed txn wrote here: no edge
        plog.out.rows.append({"what": "edges", "blob": b""})
        return
    cv, cid = plog.val[cm], plog.ids[cm]
    order = np.lexsort((cid, cv))
    s, _ = _groups([cv[order]])
    wvals, wids = cv[order][s], cid[order][s]                                 # value -> lowest writer
    edges = []
    obs = plog.ack | plog.read
    vo, vv = plog.off[obs], plog.val[obs]
    order = np.lexsort((vv, vo))
    s, _ = _groups([vo[order], vv[order]])
    vo, vv = vo[order][s], vv[order][s]                                       # versions, by (offset, value)
    j = np.searchsorted(wvals, vv)
    has = (j < len(wvals)) & (wvals[np.minimum(j, max(len(wvals) - 1, 0))] == vv) if len(wvals) else \
        np.zeros(len(vv), bool)
    vo, wr = vo[has], wids[j[has]]
    d = np.flatnonzero(wr[1:] != wr[:-1])
    edges.append(np.stack([wr[d], wr[d + 1], np.zeros(len(d), np.int64), vo[d + 1]], 1))
    rm = plog.read & plog.rc & (plog.op_kind == TXN_OK_READ_OP)
    rv, ro, rid = plog.val[rm], plog.off[rm], plog.ids[rm]
    j = np.searchsorted(wvals, rv)
    has = (j < len(wvals)) & (wvals[np.minimum(j, max(len(wvals) - 1, 0))] == rv) if len(wvals) else \
        np.zeros(len(rv), bool)
    src, dst, at = wids[j[has]], rid[has], ro[has]
    keep = src != dst
    edges.append(np.stack([src[keep], dst[keep], np.ones(int(keep.sum()), np.int64), at[keep]], 1))
    plog.out.rows.append({"what": "edges", "blob": np.concatenate(edges).astype(np.int64).tobytes()})


# -- the driver -------------------------------------------------------------------------
def _client_txns(ops: DataFrame) -> DataFrame:
    return ops.filter((F.col("role") == "client") & (F.col("f") == "txn"))


def prepare(ops: Callable[[], DataFrame], ctx: "Context", acc: "_Runs",
            markers: dict[int, MarkerOf]) -> dict[int, dict[int, Settled]]:
    """Before the partition pass: which partitions a rebalance named right
    after each op (txn.rebalanced), for the int-poll checks, and the info txns
    settled (spark_settle.py; ``ctx.settled``), returned per run. Nothing to do
    without txns. A failure is kept for ``finish`` to report."""
    txn_runs = [r for r, b in acc.base.items() if "txn" in b["ops"]]
    if not txn_runs:
        return {}
    try:
        _rebalanced(ops(), ctx)
    except Exception as e:  # noqa: BLE001 - reported by finish, never a pass
        ctx.rebalanced.clear()
        acc.txn_prepare_error = f"rebalances: {type(e).__name__}: {str(e).strip()[:300]}"  # type: ignore[attr-defined]
    try:
        return settle_runs(ops(), ctx, markers)
    except Exception as e:  # noqa: BLE001 - every check an unsettled txn could sway says so, never a pass
        ctx.settled.clear()
        acc.fail(f"settling info txns: {type(e).__name__}: {str(e).strip()[:300]}", SETTLED_TYPES, txn_runs)
        return {}


def _rebalanced(ops: DataFrame, ctx: "Context") -> None:
    client = F.col("role") == "client"
    rb = ops.filter(client & (F.col("f") == "rebalance")).select(
        "run", "process", F.col("invoke_index").alias("rb"), "partitions", "revoked")
    named = {(r["run"], r["rb"]): frozenset(r["partitions"] or ()) | frozenset(r["revoked"] or ())
             for r in rb.collect()}
    if not named:
        return
    prev = (ops.filter(client & (F.col("f") != "rebalance")).select("run", "process", "invoke_index")
            .join(F.broadcast(rb.select("run", "process", "rb")), ["run", "process"])
            .filter(F.col("invoke_index") < F.col("rb"))
            .groupBy("run", "rb").agg(F.max("invoke_index").alias("op")).collect())
    for r in prev:
        key = (r["run"], r["op"])
        ctx.rebalanced[key] = ctx.rebalanced.get(key, frozenset()) | named[(r["run"], r["rb"])]


def finish(ops: Callable[[], DataFrame], ctx: "Context", acc: "_Runs", rows: list[Any] | None,
           settings: Settings) -> None:
    """After the partition pass: torn-transaction, the cycle types, and ok txns
    with writes as acknowledged sends (``has_ok_send``). A failure marks its
    types with the error."""
    k = settings.max_witnesses
    txn_runs = [r for r, b in acc.base.items() if "txn" in b["ops"]]
    cycle_types = tuple(CYCLE_TYPES)
    for run in acc.base:
        acc.found[run].setdefault("torn-transaction", Finding())
        for t in cycle_types:
            acc.found[run].setdefault(t, Finding())
    if not txn_runs:
        return
    failed = getattr(acc, "txn_prepare_error", None)
    if failed:
        acc.fail(failed, ("int-poll-skip", "int-nonmonotonic-poll"), txn_runs)
    try:
        nodes: dict[int, list[tuple[int, Any, int, int]]] = defaultdict(list)
        for r in (_client_txns(ops()).filter((F.col("type") == "ok") & F.col("time").isNotNull())
                  .select("run", "invoke_index", "process", "invoke_time", "time",
                          (F.size("messages") > 0).alias("writes")).collect()):
            nodes[r["run"]].append((r["invoke_index"], r["process"], r["invoke_time"], r["time"]))
            if r["writes"]:
                acc.base[r["run"]]["has_ok_send"] = True
        for run, (committed, _) in ctx.settled.items():    # settled committed: acknowledged writes too
            if len(committed) and run in acc.base:
                acc.base[run]["has_ok_send"] = True
        edges: dict[int, list] = defaultdict(list)
        for row in rows or []:
            if row["what"] == "edges" and row["blob"]:
                arr = np.frombuffer(row["blob"], np.int64).reshape(-1, 4)
                edges[row["run"]] += [(int(a), int(b), KIND_CODES[c], row["partition"], int(o)) for a, b, c, o in arr]
        for run in txn_runs:
            if rows is None or any(acc.found[run][t].error for t in cycle_types):
                continue
            acc.found[run].update(cycle_findings(edges[run], nodes[run], settings))
    except Exception as e:  # noqa: BLE001 - never a pass on a crash
        acc.fail(f"cycles: {type(e).__name__}: {str(e).strip()[:300]}", cycle_types, txn_runs)
    try:
        for run, f in torn(ops(), ctx, k).items():
            acc.found[run]["torn-transaction"] = f
    except Exception as e:  # noqa: BLE001
        acc.fail(f"torn: {type(e).__name__}: {str(e).strip()[:300]}", ("torn-transaction",), txn_runs)


def torn(ops: DataFrame, ctx: "Context", k: int) -> dict[int, Finding]:
    """torn-transaction per run (txn.check_torn): ok and info txns' writes
    joined with the drain's reads of completed partitions."""
    if not ctx.drained:
        return {}
    spark = ops.sparkSession
    client = F.col("role") == "client"
    txns = _client_txns(ops)
    settled = effective_types(spark, ctx)
    if settled is not None:     # a settled info txn by its settled type (settle.py)
        txns = (txns.join(F.broadcast(settled), ["run", "invoke_index"], "left")
                .withColumn("type", F.coalesce("settled_type", "type")))
    tw = (txns.filter(F.col("type").isin("ok", "info") & (F.size("messages") > 0))
          .select("run", F.col("invoke_index").alias("id"), "type", F.posexplode("messages").alias("pos", "m"))
          .select("run", "id", "type", "pos", F.col("m.partition").alias("partition"),
                  F.col("m.offset").alias("offset"), F.col("m.value").alias("value")))
    drained = (ops.filter(client & (F.col("f") == "poll") & F.coalesce(F.col("drain"), F.lit(False))
                          & (F.col("type") == "ok") & (F.size("messages") > 0))
               .select("run", F.explode("messages").alias("m"))
               .select("run", F.col("m.partition").alias("partition"), F.col("m.value").alias("value"))
               .distinct().withColumn("present", F.lit(True)))
    complete = spark.createDataFrame(sorted(ctx.drained), "run int, partition int").withColumn("complete", F.lit(True))
    j = (tw.join(F.broadcast(complete), ["run", "partition"], "left").join(drained, ["run", "partition", "value"], "left")
         .withColumn("complete", F.coalesce("complete", F.lit(False)))
         .withColumn("present", F.col("complete") & F.coalesce("present", F.lit(False))))
    g = j.groupBy("run", "id", "type").agg(
        F.count(F.lit(1)).alias("n"), F.sum(F.col("complete").cast("int")).alias("nc"),
        F.sum(F.col("present").cast("int")).alias("np"),
        F.sort_array(F.collect_list(F.struct("pos", "partition", "offset", "value", "complete", "present"))).alias("ws"))
    bad = g.filter((F.col("np") > 0) & (F.col("nc") > F.col("np")) & ((F.col("type") == "ok") | (F.col("nc") == F.col("n"))))
    rows = (bad.withColumn("rn", F.row_number().over(Window.partitionBy("run").orderBy("id")))
            .withColumn("cnt", F.count(F.lit(1)).over(Window.partitionBy("run")))
            .filter(F.col("rn") <= k).collect())
    out: dict[int, Finding] = {}
    for r in sorted(rows, key=lambda r: (r["run"], r["id"])):
        f = out.setdefault(r["run"], Finding(count=r["cnt"]))
        present = [[w["partition"], w["offset"], w["value"]] for w in r["ws"] if w["present"]]
        absent = [[w["partition"], w["offset"], w["value"]] for w in r["ws"] if w["complete"] and not w["present"]]
        f.witnesses.append(Witness(absent[0][0], [o for _, o, _ in absent if o is not None], [v for *_, v in absent],
                                   [r["id"]], extra={"present": present, "absent": absent}))
    return out

