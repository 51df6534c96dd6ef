"""The Spark engine: history.parquet (one run or many) -> RunFindings per run.

Jobs of pyarrow-reading tasks (spark_scan.py, spark_frames.py): one read of
every row group for the op statistics and the control ops (nemesis, sampler,
assign/subscribe, drain); the per-partition pass (spark_partition.py) over
the message index (history.message_index: built first if the history has none); the
ops the witnesses name. Transactions and groups add their own passes
(spark_txn.py, spark_groups.py) when a history has them. Elections are
judged after the engine, in Python (``elections.judge``), from the lost
writes this pass lists. A failing job or check marks the anomaly types it decides
with the error, for every run; the rest still report.
"""
from __future__ import annotations

import functools
import json
import logging
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .common import Finding, RunFindings, Settings, Witness, availability, drain_counts, lag_summary, percentile
from .hanging import drain_view
from .settle import MarkerOf
from .spark_settle import writers_of
from history.message_index import build_index, index_is_current, index_path
from .spark_frames import Control, control_pass, partition_results, read_ops, warm_up, witness_ops
from .spark_arrays import unpack_sorted
from .spark_partition import ALL_TYPES, CHECKS, Context
from .spark_scan import Slice, index_slices
from history.row_groups import Source, history_files, source
from . import spark_txn
from .spark_committed_offsets import check_committed_offsets
from .spark_groups import GroupPass
from .spark_share import SharePass

log = logging.getLogger(__name__)

SMALL = 200_000   # rows: below this, one shuffle partition (task overhead dominates)


def _err(name: str, e: BaseException | str) -> str:
    if isinstance(e, str):
        return f"{name}: {e}"
    text = str(e).strip().splitlines()
    return f"{name}: {type(e).__name__}: {text[0][:300] if text else ''}"


def analyze_runs(spark: Any, parquet_path: str, settings: Settings,
                 timings: dict[str, float] | None = None,
                 markers: dict[int, MarkerOf] | None = None,
                 wanted: dict[int, set[tuple[int, int]]] | None = None) -> dict[int, RunFindings]:
    """Check every run in the file; a run id with no ops is absent from the result.
    ``markers``: per run, Kafka's record of transaction markers (settle.py), where there is one;
    ``wanted``: per run, the (partition, value)s whose writing op hanging.judge names (hanging.wanted).
    ``timings`` gets the seconds of each job ("index": building a message index
    the history lacked; "checks": statistics, control ops and the
    per-partition pass; "witnesses": the ops witnesses name)."""
    timings = {} if timings is None else timings
    key = "spark.sql.shuffle.partitions"
    saved = spark.conf.get(key)
    src = source(parquet_path)
    if src.rows < SMALL:
        spark.conf.set(key, "1")
    try:
        with tempfile.TemporaryDirectory(prefix="kchaos-index-") as scratch:
            indexes = []
            for f in history_files(parquet_path):
                own = index_path(f)
                if index_is_current(f, own):
                    indexes.append(own)
                else:
                    t0 = time.monotonic()
                    indexes.append(_build_index(f, Path(scratch)))
                    timings["index"] = timings.get("index", 0.0) + time.monotonic() - t0
            slices = index_slices(indexes)
            # the ops as a DataFrame, for the txn and group passes only: made when first asked for
            # (on a cold session it costs about 0.5 s, and most histories have neither)
            ops = functools.cache(lambda: read_ops(spark, parquet_path))
            return _analyze(spark, src, slices, ops, settings, timings, markers or {}, wanted or {})
    finally:
        spark.conf.set(key, saved)


def _build_index(history: Path, scratch: Path) -> Path:
    """A message index for a history without a current one, built beside it
    (where a cluster's workers find it, as they find the history) or, in a
    folder that is not writable, in ``scratch``."""
    own = index_path(history)
    log.info("%s: no current message index; building one", history)
    tmp = own.with_name(f"{own.name}.{time.monotonic_ns()}.tmp")
    try:
        build_index(history, tmp)
        tmp.replace(own)
        return own
    except OSError as e:
        tmp.unlink(missing_ok=True)
        log.info("%s: %s; building the message index in %s", own, e, scratch)
    out = scratch / f"{len(list(scratch.iterdir()))}.messages.parquet"
    build_index(history, out)
    return out


class _Runs:
    """Per-run accumulation of findings and errors."""

    def __init__(self, runs: dict[int, dict[str, Any]]):
        self.base = runs
        self.found: dict[int, dict[str, Finding]] = {r: {} for r in runs}
        self.errors: dict[int, list[str]] = {r: [] for r in runs}

    def fail(self, msg: str, types: tuple[str, ...], runs: Any = None) -> None:
        for r in (self.base if runs is None else runs):
            if r not in self.found:
                continue
            if msg not in self.errors[r]:
                self.errors[r].append(msg)
            for t in types:
                self.found[r][t] = Finding(error=msg)


def _analyze(spark: Any, src: Source, slices: dict[tuple[int, int | None], list[Slice]],
             ops: Callable[[], Any], settings: Settings, timings: dict[str, float],
             markers: dict[int, MarkerOf], wanted: dict[int, set[tuple[int, int]]]) -> dict[int, RunFindings]:
    """``src``: the file's row groups, ``slices``: its message index (the hot
    passes); ``ops()``: the ops as a DataFrame (the transaction and group passes)."""
    t0 = time.monotonic()
    control: Control = control_pass(spark, src)
    k = settings.max_witnesses
    stats, ctl = control.stats, control.rows
    acc = _Runs(stats)
    ctx = Context(k=k)
    resets: dict[tuple[int, int], list[int]] = defaultdict(list)
    drain_parts: dict[int, set[int]] = defaultdict(set)
    drain_stops: dict[int, list[str | None]] = defaultdict(list)
    for r in ctl:
        if r["role"] == "client" and r["f"] in ("assign", "subscribe") and r["type"] in ("ok", "info"):
            resets[(r["run"], r["process"])].append(r["invoke_index"])
            if r["f"] == "assign" and r["type"] == "ok":   # its partitions' chains go on
                ctx.kept[(r["run"], r["process"], r["invoke_index"])] = frozenset(r["partitions"] or ())
        if r["role"] == "client" and r["f"] == "poll" and r["drain"] and r["type"] == "ok":
            drain_parts[r["run"]].update(r["partitions"] or [])
        elif r["role"] == "client" and r["f"] == "poll" and r["drain"]:
            drain_stops[r["run"]].append(r["error"])      # control rows come in history order
    ctx.resets = {key: np.array(sorted(v), np.int64) for key, v in resets.items()}
    for run, base in acc.base.items():
        if base["drains"] and base["drains"] == base["drains_ok"]:
            ctx.drained |= {(run, p) for p in drain_parts[run]}
    settled = spark_txn.prepare(ops, ctx, acc, markers)   # transactions: rebalances after txns, info txns settled
    groups = GroupPass(ops, acc, k)
    groups.prepare(ctx)                    # consumer groups: rebalances cut poll chains (ctx.rebalances)

    counts: dict[tuple[int, str], int] = defaultdict(int)
    wits: dict[tuple[int, str], list[tuple[list[int], Witness]]] = defaultdict(list)
    stat: dict[tuple[int, str], int] = defaultdict(int)
    lags: dict[int, list[np.ndarray]] = defaultdict(list)
    ack_times: dict[int, dict[int, np.ndarray]] = defaultdict(dict)   # run -> partition -> ack times (ns)
    losses: dict[int, list[tuple[int, int | None, int, int | None]]] = defaultdict(list)
    inconsistent: dict[int, list[tuple[int, int, int | None]]] = defaultdict(list)
    part_errors: list[tuple[int, str, str]] = []
    ok_parts: dict[int, set[int]] = defaultdict(set)      # partitions with an acknowledged value
    try:
        rows = partition_results(spark, slices, ctx)
    except Exception as e:  # noqa: BLE001
        log.error("partition pass crashed: %s", _err("messages", e))
        acc.fail(_err("messages", e), ALL_TYPES)
        rows = None
    for row in rows or []:
        run, what, typ = row["run"], row["what"], row["type"]
        if what == "count":
            counts[(run, typ)] += row["n"]
        elif what == "witness":
            w = Witness(row["partition"], list(row["offsets"]), list(row["values"]), list(row["ids"]),
                        extra=json.loads(row["extra"]) if row["extra"] else {})
            wits[(run, typ)].append((list(row["key"]), w))
        elif what == "stat":
            stat[(run, typ)] += row["n"]
            if typ == "acknowledged" and row["n"] > 0:
                ok_parts[run].add(row["partition"])
        elif what == "lag":
            lags[run].append(unpack_sorted(row["blob"]))
        elif what == "ack_times":
            ack_times[run][row["partition"]] = unpack_sorted(row["blob"])
        elif what == "losses":
            times = np.frombuffer(row["blob"], np.int64)
            losses[run] += [(row["partition"], None if o < 0 else int(o), int(v), int(t) if t >= 0 else None)
                            for o, v, t in zip(row["offsets"], row["values"], times)]
        elif what == "inconsistent":
            times = np.frombuffer(row["blob"], np.int64)
            inconsistent[run] += [(row["partition"], int(o), int(t) if t >= 0 else None)
                                  for o, t in zip(row["offsets"], times)]
        elif what == "error":
            part_errors.append((run, typ, row["extra"]))
    if rows is not None:
        for run in acc.base:
            for t in ALL_TYPES:
                items = sorted(wits.get((run, t), []), key=lambda kw: kw[0])
                acc.found[run][t] = Finding(count=counts.get((run, t), 0), witnesses=[w for _, w in items[:k]])
    for run, name, text in part_errors:
        types = CHECKS[name][1] if name in CHECKS else ALL_TYPES
        acc.fail(_err(name, text), types, [run])
    spark_txn.finish(ops, ctx, acc, rows, settings)     # transactions: torn, cycles, ok txns as acks
    group_stats = groups.check()                        # consumer groups (spark_groups.py)
    share_stats = SharePass(ops, acc, k).check()        # share groups (spark_share.py)
    for run, st in check_committed_offsets(ops, acc, k).items():     # spark_committed_offsets.py
        group_stats.setdefault(run, {}).update(st)

    writers: dict[int, dict[tuple[int, int], int]] = defaultdict(dict)
    try:
        writers.update(writers_of(ops, wanted))
    except Exception as e:  # noqa: BLE001
        log.error("writers crashed: %s", _err("writers", e))
        acc.fail(_err("writers", e), ("hanging-transaction",), list(wanted))

    timings["checks"] = time.monotonic() - t0
    t0 = time.monotonic()
    ids = {(r, i) for r, fs in acc.found.items() for f in fs.values() for w in f.witnesses for i in w.op_ids}
    ids |= {(r, i) for r, ws in writers.items() for i in ws.values()}
    op_rows: dict[int, dict[int, dict]] = defaultdict(dict)
    try:
        for d in witness_ops(spark, src, ids):
            op_rows[d["run"]][d["invoke_index"]] = d
    except Exception as e:  # noqa: BLE001
        log.error("witness ops crashed: %s", _err("witness ops", e))
        acc.fail(_err("witness ops", e), ())
    timings["witnesses"] = time.monotonic() - t0
    control_rows: dict[int, list[dict]] = defaultdict(list)
    drains: dict[int, list[dict]] = defaultdict(list)
    for r in ctl:
        if r["role"] != "client":
            control_rows[r["run"]].append(r)
        elif r["drain"]:
            drains[r["run"]].append(r)

    out = {}
    for run, base in acc.base.items():
        lag = np.sort(np.concatenate(lags[run])).astype(float) if lags.get(run) else np.zeros(0)
        drain_ok = bool(base["drains"]) and base["drains"] == base["drains_ok"]
        out[run] = RunFindings(
            anomalies=acc.found[run],
            stats={
                **group_stats.get(run, {}),
                **share_stats.get(run, {}),
                **({"settled_txns": [settled[run][i].as_dict() for i in sorted(settled[run])]}
                   if settled.get(run) else {}),
                "ops": base["ops"],
                "acknowledged": stat.get((run, "acknowledged"), 0),
                "read": stat.get((run, "read"), 0),
                "drain_complete": drain_ok and all((run, p) in ctx.drained for p in ok_parts[run]),
                "drains": drain_counts(base["drains"], base["drains_ok"], drain_stops.get(run, [])),
                "availability": availability(dict(base["avail"])),
                "realtime_lag": lag_summary(*((float(percentile(lag, 0.5)), float(percentile(lag, 0.99)),
                                               float(lag[-1])) if len(lag) else (None,) * 3)),
            },
            elections=[], mode=base["mode"], has_ok_send=base["has_ok_send"],
            losses=losses[run], inconsistent=inconsistent[run], ack_times=ack_times.get(run, {}),
            errors=acc.errors[run], op_rows=op_rows[run], control_rows=control_rows[run],
            writers=writers[run], drain_view=drain_view(drains[run]))
    return out

