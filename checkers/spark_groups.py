"""Consumer-group checks on Spark (definitions: groups.py; the witness orders are the same).

Only runs whose history has ``commit`` or ``rebalance`` ops pay for anything;
the others get zero counts without a Spark job. For those runs:

* ``prepare`` (before the per-partition pass): the commit and rebalance ops
  (few: collected whole), each rebalance with the op it follows (a window over
  the ops of the processes that have rebalances); it tells the poll chains
  (``Context.rebalances``) where rebalances cut them.
* ``check`` (after it): commit-backwards from a self-join of the ok commits per
  (run, group, partition); lost-consumption and redelivery in one vectorised
  pass per Kafka partition (``applyInArrow``, numpy) over every observation of
  the partition, with the commits, assignments and group facts shipped along.
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .common import Finding, Witness
from .groups import GROUP_TYPES, UNKNOWN_STAT, commit_offsets
from .spark_arrays import unique
from .spark_partition import OUT_DDL, Context, Out
from history.arrays import _np

log = logging.getLogger(__name__)

CHAIN_TYPES = ("nonmonotonic-poll", "poll-skip")
# per message of the group pass
ACK, TXN_OK_W, TXN_INFO_W, TXN_FAIL_W, READ, TXN_READ = 0, 1, 2, 3, 4, 5


@dataclass
class GroupContext:
    """What a partition needs for the group checks (shipped to workers)."""
    k: int
    codes: dict[tuple[int, str], int] = field(default_factory=dict)        # (run, group) -> rank of its name
    names: dict[tuple[int, int], str] = field(default_factory=dict)        # (run, code) -> group
    rc: dict[tuple[int, int], bool] = field(default_factory=dict)          # (run, code) -> read_committed
    tainted: set[tuple[int, int]] = field(default_factory=set)             # a member poll ended info
    # (run, partition) -> commits naming it, and (run, code) -> info commits of unknown partitions:
    # rows (code, id, invoke_time, time or -1, ok, offset or -1 for unknown)
    commits: dict[tuple[int, int], list[tuple[int, int, int, int, bool, int]]] = field(default_factory=dict)
    anyp: dict[tuple[int, int], list[tuple[int, int, int, int, bool, int]]] = field(default_factory=dict)
    # (run, partition) -> assignments (process, key, start time, event id, code)
    assigns: dict[tuple[int, int], list[tuple[int, int, int, int, int]]] = field(default_factory=dict)


class GroupPass:
    """The group checks of one ``spark._analyze`` call; its failures mark only its types
    (and the poll-chain types when the rebalances could not be had)."""

    def __init__(self, ops: Callable[[], Any], acc: Any, k: int):
        self.ops, self.acc, self.k = ops, acc, k
        self.runs = sorted(r for r, b in acc.base.items() if "commit" in b["ops"] or "rebalance" in b["ops"])
        self.gctx = GroupContext(k=k)
        self.error: str | None = None
        self.stats: dict[int, dict[str, int]] = defaultdict(dict)

    def prepare(self, ctx: Context) -> None:
        if not self.runs:
            return
        try:
            self._prepare(ctx)
        except Exception as e:  # noqa: BLE001 - reported by check(), never a pass
            log.exception("group control crashed")
            self.error = f"groups: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"

    def _prepare(self, ctx: Context) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        ops = self.ops().filter((F.col("role") == "client") & F.col("run").isin(self.runs))
        rows = [r.asDict(recursive=True) for r in ops.filter(F.col("f").isin("commit", "rebalance")).select(
            "run", "invoke_index", "invoke_time", "time", "process", "type", "f", "group", "committed",
            "partitions", "revoked", "value").collect()]
        members = sorted({(r["run"], r["process"]) for r in rows if r["f"] == "rebalance"})
        after: dict[tuple[int, int], tuple[int, int] | None] = {}
        if members:
            spark = self.ops().sparkSession
            mdf = spark.createDataFrame(members, "run int, process bigint")
            w = (Window.partitionBy("run", "process").orderBy("invoke_index")
                 .rowsBetween(Window.unboundedPreceding, -1))
            prev = F.last(F.when(F.col("f") != "rebalance", F.struct("invoke_index", "invoke_time")),
                          ignorenulls=True).over(w)
            for r in (ops.join(F.broadcast(mdf), ["run", "process"])
                      .select("run", "invoke_index", "f", prev.alias("after"))
                      .filter(F.col("f") == "rebalance").collect()):
                a = r["after"]
                after[(r["run"], r["invoke_index"])] = None if a is None else (a["invoke_index"], a["invoke_time"])
        agg = (ops.filter(F.col("group").isNotNull() & F.col("f").isin("poll", "txn"))
               .groupBy("run", "group")
               .agg(F.max((F.col("f") == "poll") & (F.col("type") == "info")).alias("tainted"),
                    F.max(F.coalesce(F.col("isolation"), F.lit("")) != "read_uncommitted").alias("rc"))
               .collect())
        g = self.gctx
        names = sorted({(r["run"], r["group"]) for r in rows if r["group"] is not None}
                       | {(r["run"], r["group"]) for r in agg})
        for run, name in names:
            code = sum(1 for rr, _ in names if rr == run and _ < name)
            g.codes[(run, name)], g.names[(run, code)] = code, name
        for r in agg:
            code = g.codes[(r["run"], r["group"])]
            g.rc[(r["run"], code)] = bool(r["rc"])
            if r["tainted"]:
                g.tainted.add((r["run"], code))
        events: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for r in sorted(rows, key=lambda r: r["invoke_index"]):
            if r["f"] == "commit" and r["group"] is not None:
                value = None if r["value"] is None else json.loads(r["value"])
                committed = [(c["partition"], c["offset"]) for c in r["committed"] or []]
                offs = commit_offsets(r["type"], committed, value)
                code = g.codes[(r["run"], r["group"])]
                row = (code, r["invoke_index"], r["invoke_time"], -1 if r["time"] is None else r["time"],
                       r["type"] == "ok")
                if offs is None:
                    g.anyp.setdefault((r["run"], code), []).append(row + (-1,))
                for p, off in (offs or {}).items():
                    g.commits.setdefault((r["run"], p), []).append(row + (off,))
            elif r["f"] == "rebalance":
                events[(r["run"], r["process"])].append(r)
        for (run, q), evs in events.items():
            held: set[int] = set()
            applied = 0          # events folded into ``held``: those before the current lower bound
            for e in evs:
                a = after.get((run, e["invoke_index"]))
                lo = e["invoke_index"] if a is None else a[0]
                while applied < len(evs) and evs[applied]["invoke_index"] < lo:
                    held = (held - set(evs[applied]["revoked"] or ())) | set(evs[applied]["partitions"] or ())
                    applied += 1
                ends = frozenset(e["partitions"] or ()) | frozenset(e["revoked"] or ())
                if ends:
                    ctx.rebalances.setdefault((run, q), []).append((lo, e["invoke_index"], ends))
                if e["group"] is None:
                    continue
                start = -1 if a is None else a[1]
                code = g.codes[(run, e["group"])]
                for p in e["partitions"] or ():
                    key = lo if p not in held else e["invoke_index"]
                    g.assigns.setdefault((run, p), []).append((q, key, start, e["invoke_index"], code))

    def check(self) -> dict[int, dict[str, int]]:
        """Fill the runs' findings of the group types; returns their extra stats by run."""
        acc = self.acc
        for run in acc.base:
            for t in GROUP_TYPES:
                acc.found[run][t] = Finding()
        if not self.runs:
            return {}
        if self.error:
            acc.fail(self.error, GROUP_TYPES + CHAIN_TYPES, self.runs)
            return {}
        try:
            self._backwards()
        except Exception as e:  # noqa: BLE001
            log.exception("commit-backwards crashed")
            acc.fail(f"groups: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}",
                     ("commit-backwards",), self.runs)
        try:
            self._partitions()
        except Exception as e:  # noqa: BLE001
            log.exception("group pass crashed")
            acc.fail(f"groups: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}",
                     ("lost-consumption", "redelivery"), self.runs)
        return dict(self.stats)

    def _backwards(self) -> None:
        from pyspark.sql import functions as F
        ops = self.ops()
        c = (ops.filter((F.col("role") == "client") & (F.col("f") == "commit") & (F.col("type") == "ok")
                        & F.col("group").isNotNull() & F.col("run").isin(self.runs))
             .select("run", "group", F.col("invoke_index").alias("id"), F.col("invoke_time").alias("inv"),
                     "time", F.explode("committed").alias("c"))
             .select("run", "group", "id", "inv", "time", F.col("c.partition").alias("p"),
                     F.col("c.offset").alias("off")))
        a, b = c.alias("a"), c.alias("b")
        j = b.join(a, (F.col("a.run") == F.col("b.run")) & (F.col("a.group") == F.col("b.group"))
                   & (F.col("a.p") == F.col("b.p")) & (F.col("a.time") < F.col("b.inv"))
                   & (F.col("a.off") > F.col("b.off")))
        rows = (j.groupBy(F.col("b.run").alias("run"), F.col("b.p").alias("p"), F.col("b.id").alias("id"),
                          F.col("b.off").alias("off"), F.col("b.group").alias("group"))
                .agg(F.min(F.struct((-F.col("a.off")).alias("noff"), F.col("a.time").alias("t"),
                                    F.col("a.id").alias("aid"))).alias("a"))
                .collect())
        by_run: dict[int, list[tuple[tuple[int, int], Witness]]] = defaultdict(list)
        g = self.gctx
        for r in rows:
            if self._explained_backwards(r["run"], g.codes[(r["run"], r["group"])], r["p"], r["id"], r["off"]):
                continue
            by_run[r["run"]].append(((r["p"], r["id"]), Witness(r["p"], [-r["a"]["noff"], r["off"]], [],
                                                                 [r["a"]["aid"], r["id"]],
                                                                 extra={"group": r["group"]})))
        for run, items in by_run.items():
            items.sort(key=lambda kw: kw[0])
            self.acc.found[run]["commit-backwards"] = Finding(count=len(items),
                                                              witnesses=[w for _, w in items[: self.k]])

    def _explained_backwards(self, run: int, code: int, p: int, b_id: int, ob: int) -> bool:
        """An info commit of the group invoked before commit ``b_id`` that asked
        for ``ob`` or less, or for unknown offsets (groups.check_commit_backwards)."""
        g = self.gctx
        inv = next(row[2] for row in g.commits[(run, p)] if row[0] == code and row[1] == b_id)
        return (any(row[2] < inv for row in g.anyp.get((run, code), ()))
                or any(row[0] == code and not row[4] and row[2] < inv and row[5] <= ob
                       for row in g.commits.get((run, p), ())))

    def _partitions(self) -> None:
        from pyspark.sql import functions as F
        client = F.col("role") == "client"
        ops = self.ops().filter(client & F.col("run").isin(self.runs))
        ru = F.coalesce(F.col("isolation") == "read_uncommitted", F.lit(False))
        base = ["run", F.col("invoke_index").alias("id"), "process", F.col("time").alias("t_done"), "group",
                ru.alias("ru"), F.coalesce(F.col("drain"), F.lit(False)).alias("drain")]

        def flat(df: Any, col: str, kind: Any) -> Any:
            return (df.select(*base, kind.alias("kind"), F.posexplode(col).alias("pos", "m"))
                    .select("run", F.col("m.partition").alias("partition"), "id", "process", "t_done", "group",
                            "ru", "drain", "kind", "pos", F.col("m.offset").alias("offset"),
                            F.col("m.value").alias("value"))
                    .filter(F.col("offset").isNotNull()))
        typ, f = F.col("type"), F.col("f")
        txn_w = F.when(typ == "ok", TXN_OK_W).when(typ == "fail", TXN_FAIL_W).otherwise(TXN_INFO_W)
        msgs = (flat(ops.filter(f == "send"), "messages", F.lit(ACK))
                .unionByName(flat(ops.filter((f == "poll") & (typ == "ok")), "messages", F.lit(READ)))
                .unionByName(flat(ops.filter(f == "txn"), "messages", txn_w))
                .unionByName(flat(ops.filter(f == "txn"), "reads", F.lit(TXN_READ))))
        gctx = self.gctx

        def fn(key: Any, table: Any) -> Any:
            return analyze_partition(key, table, gctx)
        counts: dict[tuple[int, str], int] = defaultdict(int)
        wits: dict[tuple[int, str], list[tuple[list[int], Witness]]] = defaultdict(list)
        for row in msgs.groupBy("run", "partition").applyInArrow(fn, OUT_DDL).collect():
            run, what, typ_ = row["run"], row["what"], row["type"]
            if what == "count":
                counts[(run, typ_)] += row["n"]
            elif what == "witness":
                wits[(run, typ_)].append((list(row["key"]), Witness(
                    row["partition"], list(row["offsets"]), list(row["values"]), list(row["ids"]),
                    extra=json.loads(row["extra"]) if row["extra"] else {})))
            elif what == "stat" and row["n"]:
                self.stats[run][UNKNOWN_STAT] = self.stats[run].get(UNKNOWN_STAT, 0) + row["n"]
            elif what == "error":
                raise RuntimeError(f"partition {row['partition']}: {row['extra']}")
        for run in self.runs:
            for t in ("lost-consumption", "redelivery"):
                items = sorted(wits.get((run, t), []), key=lambda kw: kw[0])
                self.acc.found[run][t] = Finding(count=counts.get((run, t), 0),
                                                 witnesses=[w for _, w in items[: self.k]])


def analyze_partition(key: tuple, t: pa.Table, g: GroupContext) -> pa.Table:
    """lost-consumption and redelivery for one (run, partition); an "error" row if either raises."""
    run, p = int(key[0].as_py()), int(key[1].as_py())
    out = Out(run, p)
    try:
        cols = _columns(t, run, g)
        _lost(out, run, p, cols, g)
        _redelivery(out, run, p, cols, g)
    except Exception as e:  # noqa: BLE001 - reported, never a pass
        out.rows = [{"what": "error", "type": "groups", "extra": f"{type(e).__name__}: {e}"}]
    return out.table()


def _columns(t: pa.Table, run: int, g: GroupContext) -> dict[str, np.ndarray]:
    names = t["group"].combine_chunks()
    enc = pc.dictionary_encode(names)
    lookup = np.array([g.codes.get((run, s), -2) for s in enc.dictionary.to_pylist()] + [-1], np.int64)
    idx = _np(enc.indices, -1).astype(np.int64)
    return {"id": _np(t["id"]), "proc": _np(t["process"], -1).astype(np.int64), "t_done": _np(t["t_done"], -1),
            "ru": _np(t["ru"]).astype(bool), "drain": _np(t["drain"]).astype(bool),
            "kind": _np(t["kind"]).astype(np.int64), "pos": _np(t["pos"]).astype(np.int64),
            "off": _np(t["offset"]), "val": _np(t["value"]), "code": lookup[idx]}


def _lost(out: Out, run: int, p: int, c: dict[str, np.ndarray], g: GroupContext) -> None:
    kind, off, val, ids, code = c["kind"], c["off"], c["val"], c["id"], c["code"]
    reads = (kind == READ) | (kind == TXN_READ)
    ru_vis = np.ones(len(kind), bool)
    rc_vis = (kind == ACK) | (kind == TXN_OK_W) | (reads & ~c["ru"])
    aborted = unique(off[kind == TXN_FAIL_W])
    ok: dict[int, list[tuple[int, int, int]]] = defaultdict(list)        # code -> (time, id, offset)
    for gc, cid, _, tdone, is_ok, coff in g.commits.get((run, p), []):
        if is_ok:
            ok[gc].append((tdone, cid, coff))
    n, unknown, items = 0, 0, []
    for gc, cs in sorted(ok.items()):
        got = unique(off[reads & (code == gc)])
        if not len(got):
            continue
        top = max(x[2] for x in cs)
        rc = g.rc.get((run, gc), True)
        vis = (rc_vis & ~np.isin(off, aborted)) if rc else ru_vis
        m = vis & (off >= got[0]) & (off < top) & ~np.isin(off, got)
        lo, lv, lid = off[m], val[m], ids[m]
        order = np.lexsort((lv, lid, lo))
        if not len(order):
            continue
        first = order[np.append(True, lo[order][1:] != lo[order][:-1])]      # per offset: least (id, value)
        if (run, gc) in g.tainted:
            unknown += len(first)
            continue
        n += len(first)
        done = sorted(cs)
        for i in first[: g.k]:
            tdone, cid, coff = next(x for x in done if x[2] > lo[i])
            items.append(([p, gc, int(lo[i])], [int(lo[i]), coff], [int(lv[i])], [cid, int(lid[i])],
                          {"group": g.names[(run, gc)], "delivered_from": int(got[0])}))
    out.count("lost-consumption", n)
    for key, offs, vals, wids, extra in sorted(items)[: g.k]:
        out.witness("lost-consumption", key, offs, vals, wids, extra=extra)
    out.rows.append({"what": "stat", "type": UNKNOWN_STAT, "n": unknown})


def _redelivery(out: Out, run: int, p: int, c: dict[str, np.ndarray], g: GroupContext) -> None:
    sel = np.flatnonzero((c["kind"] == READ) & ~c["drain"])
    order = sel[np.lexsort((c["pos"][sel], c["id"][sel], c["proc"][sel]))]
    rproc, rid = c["proc"][order], c["id"][order]
    assigns = sorted(g.assigns.get((run, p), []), key=lambda a: (a[0], a[1], a[3]))
    cm = g.commits.get((run, p), [])
    n, items = 0, []
    for j, (q, key, start, eid, gc) in enumerate(assigns):
        nxt = assigns[j + 1][1] if j + 1 < len(assigns) and assigns[j + 1][0] == q else np.iinfo(np.int64).max
        lo, hi = np.searchsorted(rproc, q, "left"), np.searchsorted(rproc, q, "right")
        i = lo + np.searchsorted(rid[lo:hi], key, "left")
        if i >= hi or rid[i] >= nxt:
            continue
        r = order[i]
        o, y_done = c["off"][r], c["t_done"][r]
        rows = [x for x in cm if x[0] == gc] + g.anyp.get((run, gc), [])
        if not rows:
            continue
        arr = np.array([x[1:] for x in rows], np.int64).reshape(-1, 5)
        cid, cinv, ctime, cok, coff = arr.T
        cok = cok.astype(bool)
        above = np.flatnonzero(cok & (ctime < start) & (coff > o))
        if not len(above):
            continue
        last = above[np.lexsort((cid[above], cinv[above]))[-1]]
        lower = ((coff < 0) | (coff <= o)) & (cid != cid[last]) & (cinv < y_done) & (~cok | (ctime >= cinv[last]))
        if lower.any():
            continue
        n += 1
        items.append(([p, int(c["id"][r]), int(c["pos"][r])], [int(o), int(coff[last])], [int(c["val"][r])],
                      [int(c["id"][r]), int(cid[last]), eid],
                      {"group": g.names[(run, gc)], "committed": int(coff[last])}))
    out.count("redelivery", n)
    for key, offs, vals, wids, extra in sorted(items)[: g.k]:
        out.witness("redelivery", key, offs, vals, wids, extra=extra)
