"""Share-group checks on Spark (definitions and witness orders: share.py).

Only runs whose history has share-group ops pay for anything; the others get
zero counts without a Spark job. For those runs the deliveries (ok share-polls
exploded to one row per record), the marks (ok share-acks) and the answers
(share-acked events) become DataFrames; each delivery gets its lock window
from the member's sending ops, and every type is a join over one record's
(partition, offset). Only the counts and the first ``k`` witnesses per run
come back to the driver, with the few share-subscribe and share-end ops and the
nemesis ops (their leader-change windows go back as a small broadcast table).
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Any, Callable

from history.fault_intervals import NemesisOp

from .common import Finding, Witness
from .share import (EVENTS, EXPIRY_MARGIN_NS, SHARE_TYPES, UNKNOWN_COUNT_STAT, UNKNOWN_SHARE_STAT,
                    leader_change_windows)

log = logging.getLogger(__name__)

POLL_SCHEMA = "map<string,array<array<bigint>>>"
MARK_SCHEMA = "map<string,map<string,array<bigint>>>"
_WITNESS = "run int, type string, p int, o bigint, key array<bigint>, v bigint, ids array<bigint>, extra string"


class SharePass:
    """The share checks of one ``spark._analyze`` call; a failure marks only the share types."""

    def __init__(self, ops: Callable[[], Any], acc: Any, k: int):
        self.ops, self.acc, self.k = ops, acc, k
        self.runs = sorted(r for r, b in acc.base.items() if any(str(f).startswith("share-") for f in b["ops"]))

    def check(self) -> dict[int, dict[str, Any]]:
        """Sets every share type of every run in ``acc``; the share stats per run."""
        for run in self.acc.base:
            for t in SHARE_TYPES:
                self.acc.found[run][t] = Finding()
        if not self.runs:
            return {}
        try:
            return self._check()
        except Exception as e:  # noqa: BLE001 - never a pass on a crash
            log.exception("share pass crashed")
            self.acc.fail(f"share: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}",
                          SHARE_TYPES, self.runs)
            return {}

    def _check(self) -> dict[int, dict[str, Any]]:
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        ops = self.ops().filter((F.col("role") == "client") & F.col("run").isin(self.runs))
        share = ops.filter(F.col("f").startswith("share-"))
        params: dict[int, tuple[int | None, int | None]] = {}
        ends: dict[int, tuple[bool, str | None]] = {}
        for r in (share.filter(F.col("f").isin("share-subscribe", "share-end"))
                  .select("run", "invoke_index", "type", "f", "value").orderBy("run", "invoke_index").collect()):
            v = json.loads(r["value"]) if r["value"] else None
            if not isinstance(v, dict):
                continue
            if r["f"] == "share-end":
                ends[r["run"]] = (bool(v.get("complete")), v.get("why"))
            elif r["type"] == "ok" and r["run"] not in params:
                lock = v.get("lock_ms")
                params[r["run"]] = (None if lock is None else int(lock) * 1_000_000, v.get("delivery_count_limit"))
        spark = share.sparkSession
        prm = spark.createDataFrame([(r, *params.get(r, (None, None)), ends.get(r, (None, None))[0])
                                     for r in self.runs], "run int, lock long, lim long, complete boolean")
        prm = F.broadcast(prm)
        self.windows = F.broadcast(self._windows(spark, F))
        self.uncertain: dict[int, int] = defaultdict(int)
        # deliveries: (run, q process, pid, pinv, pt, p, o, v, c)
        recs = (share.filter((F.col("f") == "share-poll") & (F.col("type") == "ok"))
                .select("run", F.col("process").alias("q"), F.col("invoke_index").alias("pid"),
                        F.col("index").alias("pidx"), F.col("invoke_time").alias("pinv"), F.col("time").alias("pt"),
                        F.explode(F.from_json("value", POLL_SCHEMA)).alias("pk", "rs"))
                .select("*", F.explode("rs").alias("r"))
                .select("run", "q", "pid", "pidx", "pinv", "pt", F.col("pk").cast("int").alias("p"),
                        F.col("r")[0].alias("o"), F.col("r")[1].alias("v"), F.col("r")[2].alias("c")))
        sending = share.filter(F.col("f").isin("share-poll", "share-commit")).select(
            "run", F.col("process").alias("q"), F.col("invoke_index").alias("sid"),
            F.col("invoke_time").alias("sinv"), "f")
        last = ops.filter(~F.col("f").isin(*EVENTS)).groupBy("run", F.col("process").alias("q")).agg(
            F.max(F.coalesce("time", "invoke_time")).alias("last"))
        marks = self._marks(share.filter((F.col("f") == "share-ack") & (F.col("type") == "ok")), F).cache()
        answers = self._marks(share.filter(F.col("f") == "share-acked"), F).cache()
        answered = self._answered(recs, marks, answers, F).cache()
        kept = answered.select("run", "pid", "p", "o").distinct().withColumn("kept", F.lit(True))
        dkey = ["run", "q", "pid", "p", "o"]
        nxt = (recs.join(sending, ["run", "q"]).filter(F.col("sinv") > F.col("pinv"))
               .groupBy(*dkey).agg(F.min("sinv").alias("nxt")))
        prev = (recs.join(sending.filter(F.col("f") == "share-poll"), ["run", "q"])
                .filter(F.col("sid") < F.col("pid")).groupBy(*dkey).agg(F.max("sinv").alias("prev")))
        d = (recs.join(nxt, dkey, "left").join(prev, dkey, "left").join(last, ["run", "q"], "left").join(prm, "run")
             .join(kept, ["run", "pid", "p", "o"], "left")
             .withColumn("quiet", F.coalesce("nxt", "last"))
             .withColumn("hold", F.when(F.col("lock").isNotNull(),
                                        F.least("quiet", F.coalesce("prev", "pinv") + F.col("lock"))))
             .withColumn("held", F.col("lock").isNotNull()
                         & (F.col("quiet") >= F.col("pt") + F.col("lock") + F.lit(EXPIRY_MARGIN_NS)))
             .withColumn("expired", F.col("held") & ~F.coalesce("kept", F.lit(False)))
             .cache())
        fails = answers.filter(F.col("type") == "fail").select("run", "q", "p", "o", F.col("id").alias("fid"))
        settled_marks = (marks.filter(F.col("kind").isin("accept", "reject"))
                         .join(fails, ["run", "q", "p", "o"], "left")
                         .groupBy("run", "q", "id", "p", "o")
                         .agg(F.max(F.coalesce(F.col("fid") > F.col("id"), F.lit(False))).alias("failed"))
                         .filter(~F.col("failed")).select("run", "p", "o"))
        settled = (settled_marks
                   .unionByName(answers.filter(F.col("kind").isin("accept", "reject")
                                               & F.col("type").isin("ok", "info")).select("run", "p", "o"))
                   .unionByName(d.filter(F.col("lim").isNotNull() & (F.col("c") >= F.col("lim")))
                                .select("run", "p", "o"))
                   .distinct().cache())
        wit = [self._lost(ops, d, settled, prm, F), self._accepted(d, answers, F),
               self._not_redelivered(d, answered, F), self._pairs(d, F)]
        allw = wit[0]
        for w in wit[1:]:
            allw = allw.unionByName(w)
        ranked = allw.withColumn("n", F.count(F.lit(1)).over(Window.partitionBy("run", "type"))).withColumn(
            "rank", F.row_number().over(Window.partitionBy("run", "type").orderBy("key")))
        found: dict[tuple[int, str], list[Witness]] = defaultdict(list)
        counts: dict[tuple[int, str], int] = {}
        for r in ranked.filter(F.col("rank") <= self.k).orderBy("run", "type", "rank").collect():
            counts[(r["run"], r["type"])] = r["n"]
            found[(r["run"], r["type"])].append(Witness(r["p"], [r["o"]], [r["v"]], list(r["ids"]),
                                                        json.loads(r["extra"]) if r["extra"] else {}))
        unjudged = {r["run"]: r["n"] for r in (ops.filter(F.col("f") == "send")
                    .select("run", F.explode("messages").alias("m"))
                    .select("run", F.col("m.partition").alias("p"), F.col("m.offset").alias("o"))
                    .filter(F.col("o").isNotNull()).join(settled, ["run", "p", "o"], "left_anti")
                    .join(prm.filter(~F.coalesce("complete", F.lit(False))), "run")
                    .groupBy("run").agg(F.count(F.lit(1)).alias("n")).collect())}
        facts = {r["run"]: r for r in d.groupBy("run").agg(
            F.count(F.lit(1)).alias("deliveries"),
            F.countDistinct("p", "o").alias("records")).collect()}
        nsettled = {r["run"]: r["n"] for r in settled.groupBy("run").agg(F.count(F.lit(1)).alias("n")).collect()}
        stats: dict[int, dict[str, Any]] = {}
        for run in self.runs:
            if run not in self.acc.found:
                continue
            for t in SHARE_TYPES:
                self.acc.found[run][t] = Finding(count=counts.get((run, t), 0), witnesses=found.get((run, t), []))
            f = facts.get(run)
            st: dict[str, Any] = {"share": {"deliveries": f["deliveries"] if f else 0,
                                            "records": f["records"] if f else 0,
                                            "settled": nsettled.get(run, 0),
                                            "end_complete": ends.get(run, (None, None))[0]}}
            if unjudged.get(run):
                st[UNKNOWN_SHARE_STAT] = unjudged[run]
                st["share"]["end_why"] = ends.get(run, (None, None))[1]
            if self.uncertain.get(run):
                st[UNKNOWN_COUNT_STAT] = self.uncertain[run]
            stats[run] = st
        d.unpersist()
        answers.unpersist()
        marks.unpersist()
        answered.unpersist()
        settled.unpersist()
        return stats

    def _windows(self, spark: Any, F: Any) -> Any:
        """(run, ws, we): share.leader_change_windows of each run's nemesis ops (we null: open)."""
        by_run: dict[int, list[NemesisOp]] = defaultdict(list)
        for r in (self.ops().filter((F.col("role") == "nemesis") & F.col("run").isin(self.runs))
                  .select("run", "invoke_index", "invoke_time", "time", "f", "value", "error")
                  .orderBy("run", "invoke_index").collect()):
            by_run[r["run"]].append(NemesisOp(index=r["invoke_index"], invoke_time=r["invoke_time"],
                                              time=r["time"], f=r["f"], error=r["error"],
                                              value=json.loads(r["value"]) if r["value"] else None))
        rows = [(run, ws, we) for run, evs in by_run.items() for ws, we in leader_change_windows(evs)]
        return spark.createDataFrame(rows, "run int, ws long, we long")

    def _split(self, df: Any, lo: str, hi: str, F: Any) -> tuple[Any, Any]:
        """(rows no leader change may explain, rows one may): a window of the row's run between
        its columns ``lo`` and ``hi`` (share.leader_may_change)."""
        w = self.windows.withColumnRenamed("run", "wrun")
        on = ((F.col("run") == F.col("wrun")) & (F.col("ws") <= F.col(hi))
              & (F.col("we").isNull() | (F.col("we") >= F.col(lo))))
        return df.join(w, on, "left_anti"), df.join(w, on, "left_semi")

    def _count_uncertain(self, df: Any, F: Any) -> None:
        for r in df.groupBy("run").agg(F.count(F.lit(1)).alias("n")).collect():
            self.uncertain[r["run"]] += r["n"]

    @staticmethod
    def _marks(df: Any, F: Any) -> Any:
        """(run, q, id, time, type, kind, p, o) per mark of share-ack / share-acked rows."""
        return (df.select("run", F.col("process").alias("q"), F.col("invoke_index").alias("id"), "time", "type",
                          F.explode(F.from_json("value", MARK_SCHEMA)).alias("kind", "parts"))
                .select("*", F.explode("parts").alias("pk", "offs"))
                .select("run", "q", "id", "time", "type", "kind", F.col("pk").cast("int").alias("p"),
                        F.explode("offs").alias("o")))

    @staticmethod
    def _out(df: Any, typ: str, key: list, ids: Any, extra: Any, F: Any) -> Any:
        return df.select("run", F.lit(typ).alias("type"), "p", "o",
                         F.array(*[F.col(c).cast("long") for c in key]).alias("key"), F.col("v").alias("v"),
                         ids.alias("ids"), extra.alias("extra"))

    def _lost(self, ops: Any, d: Any, settled: Any, prm: Any, F: Any) -> Any:
        sends = (ops.filter(F.col("f") == "send")
                 .select("run", F.col("invoke_index").alias("sid"), F.explode("messages").alias("m"))
                 .select("run", "sid", F.col("m.partition").alias("p"), F.col("m.offset").alias("o"),
                         F.col("m.value").alias("v")).filter(F.col("o").isNotNull()))
        lost = sends.join(settled, ["run", "p", "o"], "left_anti").join(prm.filter(F.col("complete")), "run")
        polls = d.groupBy("run", "p", "o").agg(F.sort_array(F.collect_list("pid")).alias("pids"))
        lost = lost.join(polls, ["run", "p", "o"], "left")
        ids = F.concat(F.array(F.col("sid")), F.coalesce("pids", F.array().cast("array<bigint>")))
        return self._out(lost, "lost-share-record", ["p", "o", "sid"], ids, F.lit(None).cast("string"), F)

    def _accepted(self, d: Any, answers: Any, F: Any) -> Any:
        ok = answers.filter((F.col("type") == "ok") & (F.col("kind") == "accept")).select(
            "run", "p", "o", F.col("id").alias("aid"), F.col("time").alias("at"))
        later = (ok.join(d.select("run", "p", "o", "pid", "pinv", "v", "c"), ["run", "p", "o"])
                 .filter(F.col("pinv") > F.col("at"))
                 .groupBy("run", "p", "o", "aid").agg(F.min(F.struct("pid", "v", "c")).alias("d"))
                 .select("run", "p", "o", "aid", F.col("d.pid").alias("pid"), F.col("d.v").alias("v"),
                         F.col("d.c").alias("c")))
        extra = F.to_json(F.struct(F.col("c").alias("delivery_count")))
        return self._out(later, "share-accepted-redelivered", ["p", "o", "aid"], F.array("aid", "pid"), extra, F)

    @staticmethod
    def _answered(recs: Any, marks: Any, answers: Any, F: Any) -> Any:
        """(run, pid, p, o, eid, kind): each ok answer (eid) and the delivery it answers
        (share.answered_deliveries)."""
        ok = answers.filter(F.col("type") == "ok").select("run", "q", "kind", "p", "o", F.col("id").alias("eid"))
        marked = (ok.join(marks.select("run", "q", "kind", "p", "o", F.col("id").alias("mid")),
                          ["run", "q", "kind", "p", "o"]).filter(F.col("mid") < F.col("eid"))
                  .groupBy("run", "q", "kind", "p", "o", "eid").agg(F.max("mid").alias("mid")))
        return (marked.join(recs.select("run", "q", "p", "o", "pid"), ["run", "q", "p", "o"])
                .filter(F.col("pid") < F.col("mid")).groupBy("run", "q", "kind", "p", "o", "eid")
                .agg(F.max("pid").alias("pid")).select("run", "pid", "p", "o", "eid", "kind"))

    def _not_redelivered(self, d: Any, answered: Any, F: Any) -> Any:
        # evidence rows (eid: the release answer, or the poll for a lock held past); "owed": a missing
        # next delivery is an anomaly (not for one held past whose mark Kafka answered ok: share.py)
        mine = answered.filter(F.col("kind") == "release").select("run", "pid", "p", "o", "eid",
                                                                   F.lit(True).alias("owed"))
        exp = d.filter("held").select("run", "pid", "p", "o", F.col("pid").alias("eid"),
                                      F.col("expired").alias("owed"))
        cand = (mine.unionByName(exp).groupBy("run", "pid", "p", "o")
                .agg(F.min("eid").alias("eid"), F.min(F.when(F.col("owed"), F.col("eid"))).alias("owed_eid"))
                .join(d.select("run", "pid", "p", "o", "pinv", "pt", "v", "c", "lim", "complete"),
                      ["run", "pid", "p", "o"])
                .filter(F.col("lim").isNull() | (F.col("c") < F.col("lim"))))
        later = d.select(F.col("run").alias("nrun"), F.col("p").alias("np"), F.col("o").alias("no"),
                         F.col("pid").alias("npid"), F.col("pidx").alias("nidx"), F.col("pt").alias("npt"),
                         F.col("c").alias("nc"))
        on = ((F.col("run") == F.col("nrun")) & (F.col("p") == F.col("np")) & (F.col("o") == F.col("no"))
              & (F.col("npt") > F.col("pt")))
        first = (cand.join(later, on, "left")
                 .groupBy("run", "pid", "p", "o", "eid", "owed_eid", "pinv", "v", "c", "complete")
                 .agg(F.min(F.when(F.col("npid").isNotNull(), F.struct("nidx", "npid", "nc", "npt"))).alias("n")))
        same, excused = self._split(first.filter(F.col("n").isNotNull() & (F.col("n.nc") <= F.col("c")))
                                    .withColumn("npt_", F.col("n.npt")), "pinv", "npt_", F)
        self._count_uncertain(excused, F)
        never = (first.filter(F.col("n").isNull() & F.coalesce("complete", F.lit(False))
                              & F.col("owed_eid").isNotNull()).withColumn("eid", F.col("owed_eid")))
        bad = same.drop("npt_").unionByName(never)
        ids = F.concat(F.array("pid"), F.when(F.col("eid") != F.col("pid"), F.array("eid")).otherwise(
            F.array().cast("array<bigint>")), F.when(F.col("n").isNotNull(), F.array("n.npid")).otherwise(
            F.array().cast("array<bigint>")))
        extra = F.to_json(F.struct(F.col("c").alias("delivery_count"),
                                   F.when(F.col("eid") != F.col("pid"), F.lit("released"))
                                   .otherwise(F.lit("lock expired")).alias("why")))
        return self._out(bad, "share-not-redelivered", ["p", "o", "pid"], ids, extra, F)

    def _pairs(self, d: Any, F: Any) -> Any:
        a = d.select("run", "p", "o", F.col("q").alias("qa"), F.col("pid").alias("pa"), F.col("pt").alias("ta"),
                     F.col("pinv").alias("pinva"), F.col("c").alias("ca"), F.col("hold"))
        b = d.select("run", "p", "o", "q", "pid", "pinv", "pt", "v", "c")
        pairs = (a.join(b, ["run", "p", "o"]).filter((F.col("pinv") >= F.col("ta")) & (F.col("pa") != F.col("pid")))
                 .cache())
        down, excused = self._split(pairs.filter(F.col("c") < F.col("ca")), "pinva", "pt", F)
        # a delivery counts as uncertain when every lower-count pair of it has a possible leader change
        self._count_uncertain(excused.select("run", "p", "o", "pid").distinct()
                              .join(down.select("run", "p", "o", "pid"), ["run", "p", "o", "pid"], "left_anti"), F)
        out = None
        double = pairs.filter((F.col("qa") != F.col("q")) & F.col("hold").isNotNull()
                              & (F.col("pt") <= F.col("hold")))
        for typ, found in (("share-double-delivery", double), ("share-count-decrease", down)):
            first = (found.groupBy("run", "p", "o", "pid", "v", "c")
                     .agg(F.min(F.struct("pa", "ca")).alias("a")))
            extra = F.to_json(F.struct(F.array("a.ca", "c").alias("delivery_counts")))
            df = self._out(first, typ, ["p", "o", "pid"], F.array("a.pa", "pid"), extra, F)
            out = df if out is None else out.unionByName(df)
        return out
