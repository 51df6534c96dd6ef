"""Checker throughput, honestly: from history.jsonl to a verdict, stage by stage.

Generates a synthetic history of N ops (vectorised with numpy/pyarrow) with
injected anomalies, writes it as history.jsonl (the file a run leaves), then
times what ``kchaos analyze`` does with it:

* history.jsonl to verdict: ``checkers.analyze_run`` in a fresh process, as
  ``kchaos analyze`` runs it: conversion to history.parquet and its message
  index (``history.parquet``, ``history.message_index``) beside the engine start (``checkers.session``), then the checks and
  witnesses (``checkers.spark``) and results.json;
* a completed run to verdict: the same once history.parquet is current (a run
  writes it as it goes; here the first analysis's conversion made it, untimed):
  engine start, checks, witnesses;

and, in a later session, a bare scan of the same Parquet (explode the
messages, group by (partition, offset)): first as that session's first job
(cold, as the checks above ran), then warm, beside the checks run twice in
the same warm session. Every figure is printed with the
1-minute load average beside it. Exits 1, loudly, if the anomalies found differ
from those injected (so a fast wrong answer never passes for a result).

``--small`` also times ``kchaos analyze`` (a subprocess, engine auto) on a
12-op run folder, and ``--threshold`` times the reference engine against Spark
(start included) at several sizes: the figures behind
``checkers.REFERENCE_MAX_OPS``.

    .venv/bin/python bench/checker_throughput.py                 # 1M and 10M ops
    .venv/bin/python bench/checker_throughput.py --ops 1000000 --small
    .venv/bin/python bench/checker_throughput.py --ops --threshold 50000 100000 200000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from history.parquet import remove_columnar  # noqa: E402
from history.paired import MESSAGE_TYPE, PARQUET_SCHEMA, SAMPLE_TYPE  # noqa: E402

PARTITIONS = 8
PRODUCERS = 24
US = 1_000


def _s(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def _msgs(offsets: np.ndarray, part: np.ndarray, off: np.ndarray, val: np.ndarray,
          off_null: np.ndarray | None = None) -> pa.Array:
    inner = pa.StructArray.from_arrays([pa.array(part, pa.int32()), pa.array(off, pa.int64(), mask=off_null),
                                        pa.array(val, pa.int64())], fields=list(MESSAGE_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), inner)


def generate(n_ops: int, path: Path, seed: int = 7) -> dict[str, int]:
    """About half sends (one message each), half polls (0-2 messages, one
    consumer per partition reading its log in order), then a drain reading
    every partition again, plus samples, nemesis ops and injected anomalies."""
    rng = np.random.default_rng(seed)
    n_send = n_ops // 2
    part = rng.integers(0, PARTITIONS, n_send).astype(np.int32)
    order = np.argsort(part, kind="stable")
    off = np.empty(n_send, np.int64)
    counts = np.bincount(part, minlength=PARTITIONS)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    off[order] = np.arange(n_send) - np.repeat(starts, counts)
    val = off + 1                                    # values: a counter per partition
    send_type = np.full(n_send, "ok", dtype=object)

    # consumer reads: each partition's log in chunks of 0..2, polls interleaved across partitions
    poll_part, poll_sizes = [], []
    for p in range(PARTITIONS):
        sizes = rng.integers(0, 3, counts[p] + 2)
        ends = np.minimum(np.cumsum(sizes), counts[p])
        sizes = np.diff(np.concatenate([[0], ends]))
        poll_sizes.append(sizes)
        poll_part.append(np.full(len(sizes), p, np.int32))
    # interleave: poll j of partition p gets rank j*PARTITIONS + p
    rank = np.concatenate([np.arange(len(s)) * PARTITIONS + p for p, s in enumerate(poll_sizes)])
    perm = np.argsort(rank, kind="stable")
    poll_part = np.concatenate(poll_part)[perm]
    sizes = np.concatenate(poll_sizes)[perm]
    first = np.concatenate([np.concatenate([[0], np.cumsum(s)[:-1]]) for s in poll_sizes])[perm]
    n_poll = len(sizes)
    r_poll = np.repeat(np.arange(n_poll), sizes)
    r_part = np.repeat(poll_part, sizes)
    r_off = np.repeat(first, sizes) + (np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    r_val = r_off + 1

    # anomalies: lost writes (read nowhere), duplicates, inconsistent offsets, phantom writes
    injected = {"lost-write": 10, "duplicate": 5, "inconsistent-offset": 5, "phantom-write": 3}
    lost_rows = rng.choice(len(r_off) // 2, injected["lost-write"], replace=False)
    lost = set(zip(r_part[lost_rows].tolist(), r_val[lost_rows].tolist()))
    keep = np.ones(len(r_off), bool)
    keep[lost_rows] = False
    dup_rows = rng.choice(len(r_off), injected["duplicate"], replace=False)
    r_off_dup = r_off.copy()
    r_off_dup[dup_rows] += 10 ** 9                       # the same value read at a second offset
    r_val_inc = r_val.copy()
    inc_rows = rng.choice(len(r_off), injected["inconsistent-offset"], replace=False)
    r_val_inc[inc_rows] = -r_val[inc_rows]               # another value at an acked offset
    phantom = rng.choice(n_send, injected["phantom-write"], replace=False)
    send_type[phantom] = "fail"

    # drain: everything again, 500 per poll, minus the lost values
    d_idx = np.lexsort((off, part))
    lost_mask = np.zeros(n_send, bool)
    for p, v in lost:
        lost_mask[(part == p) & (val == v)] = True
    d_idx = d_idx[~lost_mask[d_idx]]
    n_drain = (len(d_idx) + 499) // 500

    # the op table: sends and polls alternate in time, then samples/nemesis, then the drain
    n_main = n_send + n_poll
    is_send = np.zeros(n_main, bool)
    is_send[rng.choice(n_main, n_send, replace=False)] = True
    slot_send = np.flatnonzero(is_send)
    slot_poll = np.flatnonzero(~is_send)
    n_ctl = max(10, n_ops // 5000)
    n_total = n_main + n_ctl + 1 + n_drain
    inv = np.arange(n_total, dtype=np.int64) * 2
    t_inv = np.arange(n_total, dtype=np.int64) * 100 * US
    t_done = t_inv + 50 * US

    process = np.empty(n_total, np.int64)
    process[slot_send] = np.arange(n_send) % PRODUCERS
    process[slot_poll] = 1000 + poll_part
    process[n_main:n_main + n_ctl] = -1
    process[n_main + n_ctl:] = 999

    # message lists: sends (1 each), polls (consumer reads, lost ones removed), drain
    lens = np.zeros(n_total, np.int64)
    lens[slot_send] = 1
    poll_lens = np.bincount(r_poll[keep], minlength=n_poll)
    lens[slot_poll] = poll_lens
    drain_lens = np.diff(np.minimum(np.arange(n_drain + 1) * 500, len(d_idx)))
    lens[n_main + n_ctl + 1:] = drain_lens
    # rows in op order: fill flat message arrays by op
    flat_part = np.empty(lens.sum(), np.int32)
    flat_off = np.empty(lens.sum(), np.int64)
    flat_val = np.empty(lens.sum(), np.int64)
    starts_op = np.concatenate([[0], np.cumsum(lens)])
    s_pos = starts_op[slot_send]
    flat_part[s_pos], flat_off[s_pos], flat_val[s_pos] = part, off, val
    kept = np.flatnonzero(keep)
    # position of each kept read inside its poll's list
    rp = r_poll[kept]
    within = np.arange(len(kept)) - np.repeat(np.cumsum(poll_lens) - poll_lens, poll_lens)
    dst = starts_op[slot_poll][rp] + within
    flat_part[dst], flat_off[dst], flat_val[dst] = r_part[kept], r_off_dup[kept], r_val_inc[kept]
    d0 = starts_op[n_main + n_ctl + 1]
    flat_part[d0:], flat_off[d0:], flat_val[d0:] = part[d_idx], off[d_idx], val[d_idx]
    off_null = np.zeros(len(flat_off), bool)
    off_null[s_pos[phantom]] = True              # a failed send is as invoked: no offset
    messages = _msgs(starts_op, flat_part, flat_off, flat_val, off_null)

    f = np.empty(n_total, object)
    f[slot_send], f[slot_poll] = "send", "poll"
    f[n_main:n_main + n_ctl] = "sample"
    f[n_main:n_main + n_ctl:5] = "start-partition"
    f[n_main + 1:n_main + n_ctl:5] = "stop-partition"
    f[n_main + n_ctl] = "assign"
    f[n_main + n_ctl + 1:] = "poll"
    typ = np.full(n_total, "ok", object)
    typ[slot_send] = send_type
    ctl = np.arange(n_main, n_main + n_ctl)
    nem = ctl[(f[ctl] != "sample")]
    typ[nem] = "info"
    role = np.full(n_total, "client", object)
    role[ctl] = "sampler"
    role[nem] = "nemesis"
    drain = np.zeros(n_total, bool)
    drain[n_main + n_ctl + 1:] = True
    partitions = [None] * n_total
    for i, p in zip(slot_send.tolist(), part.tolist()):
        partitions[i] = [p]
    for i, p in zip(slot_poll.tolist(), poll_part.tolist()):
        partitions[i] = [p]
    starts = [None] * n_total
    for i in np.concatenate([slot_send, slot_poll]).tolist():
        starts[i] = [0]
    for i in range(n_main + n_ctl, n_total):
        partitions[i] = list(range(PARTITIONS))
        if i > n_main + n_ctl:       # drain polls: messages sorted by (partition, offset)
            a, b = starts_op[i], starts_op[i + 1]
            starts[i] = np.searchsorted(flat_part[a:b], np.arange(PARTITIONS)).tolist()
    # samples: leader 1 everywhere, except partition 0 moves to broker 3 outside ISR [1] once
    smp_ids = ctl[f[ctl] == "sample"]
    sample = [None] * n_total
    for k, i in enumerate(smp_ids.tolist()):
        leader0, isr0 = (1, [1]) if k < len(smp_ids) // 2 else (3, [3])
        sample[i] = [{"partition": 0, "leader": leader0, "isr": isr0, "epoch": k}] + [
            {"partition": p, "leader": 1, "isr": [1, 2, 3], "epoch": 0} for p in range(1, PARTITIONS)]

    # value JSON, vectorised: sends "[[p,v,o]]", others a short placeholder of similar size
    j = pc.binary_join_element_wise("[[", _s(flat_part[s_pos]), ",", _s(flat_val[s_pos]), ",",
                                    _s(flat_off[s_pos]), "]]", "")
    value = np.full(n_total, '{"0":[]}', object)
    value[slot_send] = np.asarray(j.to_pylist(), object)

    columns = {
        "invoke_index": pa.array(inv), "index": pa.array(inv + 1),
        "invoke_time": pa.array(t_inv), "time": pa.array(t_done),
        "process": pa.array(np.where(process < 0, 0, process), mask=process < 0),
        "role": pa.array(role, pa.string()), "type": pa.array(typ, pa.string()),
        "f": pa.array(f, pa.string()), "drain": pa.array(drain),
        "error": pa.nulls(n_total, pa.string()), "node": pa.nulls(n_total, pa.string()),
        "messages": messages, "partitions": pa.array(partitions, pa.list_(pa.int32())),
        "partition_starts": pa.array(starts, pa.list_(pa.int32())),
        "sample": pa.array(sample, pa.list_(SAMPLE_TYPE)), "controller": pa.nulls(n_total, pa.int32()),
        "fault": pa.nulls(n_total, pa.string()), "value": pa.array(value, pa.string()),
    }
    table = pa.table({f.name: columns.get(f.name, pa.nulls(n_total, f.type)) for f in PARQUET_SCHEMA},
                     schema=PARQUET_SCHEMA)
    pq.write_table(table, path, row_group_size=1_000_000)
    return {"ops": n_total, "messages": int(lens.sum()), **injected}


def bare(spark, path: Path) -> float:
    from pyspark.sql import functions as F
    t0 = time.monotonic()
    (spark.read.parquet(str(path)).select(F.explode("messages").alias("m"))
     .groupBy("m.partition", "m.offset").count().agg(F.sum("count")).collect())
    return time.monotonic() - t0



def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def _str(a: pa.Array) -> pa.Array:
    return pc.cast(a, pa.string())


def to_jsonl(table: pa.Table, path: Path) -> None:
    """The paired rows as a history.jsonl: a header, then per op its invoke
    (samplers have none) and its completion, in index order. Sends and polls
    are built in columns; the few other ops one by one."""
    n = table.num_rows
    col = {name: table[name].combine_chunks() for name in ("invoke_index", "index", "invoke_time", "time",
                                                             "process", "role", "type", "f", "drain")}
    f = col["f"].to_numpy(zero_copy_only=False)
    role = col["role"].to_numpy(zero_copy_only=False)
    drain = col["drain"].to_numpy(zero_copy_only=False)
    client = role == "client"
    simple = client & ~drain & ((f == "send") | (f == "poll"))
    msgs = table["messages"].combine_chunks()
    flat = msgs.flatten()
    o, v, p = flat.field("offset"), flat.field("value"), flat.field("partition")
    # sends: [[p,v,o],...] (one message each here); polls: {"p":[[o,v],...]} (one partition each)
    trip = pc.binary_join_element_wise("[", _str(p), ",", _str(v), ",", pc.fill_null(_str(o), "null"), "]", "")
    trip_inv = pc.binary_join_element_wise("[", _str(p), ",", _str(v), ",null]", "")
    pair = pc.binary_join_element_wise("[", _str(o), ",", _str(v), "]", "")
    offs = msgs.offsets

    def joined(items: pa.Array) -> pa.Array:
        return pc.binary_join(pa.ListArray.from_arrays(offs, items), ",")
    parts = table["partitions"].combine_chunks()
    lens = pc.fill_null(pc.list_value_length(parts), 0).to_numpy()
    starts = parts.offsets.to_numpy()[:-1]
    pvals = parts.values.to_numpy(zero_copy_only=False)
    p0 = pa.array(np.where(lens > 0, pvals[np.minimum(starts, max(len(pvals) - 1, 0))] if len(pvals) else 0, 0))
    send_v = pc.binary_join_element_wise("[", joined(trip), "]", "")
    send_iv = pc.binary_join_element_wise("[", joined(trip_inv), "]", "")
    poll_v = pc.binary_join_element_wise('{"', _str(p0), '":[', joined(pair), "]}", "")
    is_send = pa.array(f == "send")
    comp_v = pc.if_else(is_send, send_v, poll_v)
    inv_v = pc.if_else(is_send, send_iv, pa.scalar("null"))
    head = lambda i, t: pc.binary_join_element_wise(  # noqa: E731
        '{"index":', _str(i), ',"time":', _str(t), ',"process":', _str(col["process"]), ',"type":"', "", "")
    inv_line = pc.binary_join_element_wise(head(col["invoke_index"], col["invoke_time"]), 'invoke","f":"',
                                           col["f"], '","value":', inv_v, "}", "")
    comp_line = pc.binary_join_element_wise(head(col["index"], col["time"]), col["type"], '","f":"',
                                            col["f"], '","value":', comp_v, "}", "")
    inv_line = inv_line.to_numpy(zero_copy_only=False)
    comp_line = comp_line.to_numpy(zero_copy_only=False)
    # the rest (samples, nemesis ops, the assign, drain polls), one by one
    rows = table.filter(pa.array(~simple)).to_pylist()
    for i, r in zip(np.flatnonzero(~simple).tolist(), rows):
        base = {"index": r["index"], "time": r["time"], "process": r["process"] if r["role"] == "client" else r["role"],
                "type": r["type"], "f": r["f"]}
        if r["drain"]:
            base["drain"] = True
        inv = {**base, "index": r["invoke_index"], "time": r["invoke_time"], "type": "invoke"}
        if r["f"] == "sample":
            value = {"controller": 1, "partitions": {str(s["partition"]): {"leader": s["leader"], "isr": s["isr"],
                                                                            "epoch": s["epoch"]} for s in r["sample"]}}
            inv = None
        elif r["role"] == "nemesis":
            value = {"action": "start" if r["f"].startswith("start") else "stop", "fault": "partition",
                     "nodes": ["n1"]}
            inv["value"] = value
        elif r["f"] == "assign":
            value = r["partitions"]
            inv["value"] = value
        else:                                                   # drain poll
            value = {}
            for m in r["messages"]:
                value.setdefault(str(m["partition"]), []).append([m["offset"], m["value"]])
            inv["value"] = None
        comp_line[i] = json.dumps({**base, "value": value}, separators=(",", ":"))
        inv_line[i] = None if inv is None else json.dumps(inv, separators=(",", ":"))
    lines = np.empty(2 * n, object)
    lines[0::2], lines[1::2] = inv_line, comp_line
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"kchaos-history": 2, "wall_ns_at_zero": 0}) + "\n")
        fh.write("\n".join(x for x in lines if x is not None))
        fh.write("\n")


def expected(info: dict[str, int]) -> dict[str, int]:
    """What the checkers must find: what ``generate`` injected; the one unclean
    election its samples stage (partition 0 moves outside its ISR); and what the
    injections imply for the readers: a lost write's offset is skipped by its
    partition's consumer and by the drain (two poll-skips), and a duplicate is
    read at offset o + 10^9 by the partition's consumer, which jumps ahead
    (a poll-skip) and comes back (a nonmonotonic-poll)."""
    lost, dup = info["lost-write"], info["duplicate"]
    return {t: info[t] for t in ("lost-write", "duplicate", "inconsistent-offset", "phantom-write")} | \
        {"unclean-election": 1, "poll-skip": 2 * lost + dup, "nonmonotonic-poll": dup}


def found(res) -> dict[str, int]:
    import checkers
    return {t: c for t, c, _ in checkers.summary(res) if c}


def make_run(n: int, out: Path) -> tuple[Path, dict[str, int], float]:
    run = out / f"run-{n}"
    run.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tmp = run / "generated.parquet"
    info = generate(n, tmp)
    to_jsonl(pq.read_table(tmp), run / "history.jsonl")
    tmp.unlink()
    remove_columnar(run / "history.parquet")
    return run, info, time.monotonic() - t0


# One ``checkers.analyze_run`` in a process of its own, as ``kchaos analyze`` runs
# it (a fresh driver JVM each time; in one process the second analysis would
# reuse the first one's warm JVM). Prints what the parent needs as one JSON line.
ANALYZE = """
import json, sys, time
t0 = time.monotonic()
import checkers
from checkers import session
res = checkers.analyze_run(sys.argv[1], json.loads(sys.argv[2]))
print(json.dumps({"seconds": time.monotonic() - t0, "checker": res.checker, "valid": res.valid,
                  "errors": res.errors, "cds": session.cds_state,
                  "found": {t: c for t, c, _ in checkers.summary(res) if c}}), flush=True)
"""


def analyze(run: Path, master: str, driver_memory: str) -> tuple[dict, float]:
    """(what analyze_run reported, the process's wall seconds)."""
    cfg = {"engine": "spark", "spark_master": master, "spark_conf": {"spark.driver.memory": driver_memory}}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", ANALYZE, str(run), json.dumps(cfg)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    wall = time.monotonic() - t0
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        raise RuntimeError(f"analyze_run failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(lines[-1]), wall


def _stages(rep: dict, wall: float, label: str, ops: int) -> None:
    st = rep["checker"].get("stages", {})
    nan = float("nan")
    if "convert" in st:
        print(f"   conversion      {st['convert']:6.1f} s   {ops / st['convert']:>11,.0f} ops/s   "
              f"(beside the engine start)   {_load()}")
    print(f"   engine start    {st.get('start', nan):6.1f} s   class archive: {rep['cds']}   {_load()}")
    if "index" in st:
        print(f"   message index   {st['index']:6.1f} s   (built: the history had none)   {_load()}")
    print(f"   checks          {st.get('checks', nan):6.1f} s   {_load()}")
    print(f"   witnesses       {st.get('witnesses', nan):6.1f} s   {_load()}")
    print(f"   {label} {rep['seconds']:6.1f} s   {ops / rep['seconds']:>11,.0f} ops/s   "
          f"(process wall {wall:.1f} s)   {_load()}", flush=True)


def _agrees(rep: dict, want: dict[str, int]) -> bool:
    got = rep["found"]
    print(f"   verdict {rep['valid']}  anomalies {got}  errors {rep['errors']}", flush=True)
    if got != want or rep["valid"] is not False or rep["errors"]:
        print(f"!! FAILED: anomalies found {got} differ from those injected {want} "
              f"(or errors {rep['errors']}, verdict {rep['valid']})", file=sys.stderr, flush=True)
        return False
    return True


def one(n: int, out: Path, master: str, driver_memory: str) -> bool:
    run, info, gen = make_run(n, out)
    size = (run / "history.jsonl").stat().st_size
    print(f"{info['ops']:>11,} ops  {info['messages']:>11,} messages  history.jsonl {size / 1e6:,.0f} MB  "
          f"(generated in {gen:.1f} s)", flush=True)
    want = expected(info)
    # 1. what kchaos analyze does with a history.jsonl alone: convert while Spark starts
    rep, wall = analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "converted", rep["checker"]
    _stages(rep, wall, "history.jsonl to verdict", info["ops"])
    ok = _agrees(rep, want)
    # 2. a completed run: its history.parquet was written while it ran (here: by
    # the conversion above, untimed), so analysis starts Spark and checks
    print("   a completed run (history.parquet already written: here by the conversion above, not timed):")
    rep, wall = analyze(run, master, driver_memory)
    assert rep["checker"].get("parquet") == "reused", rep["checker"]
    _stages(rep, wall, "completed run to verdict", info["ops"])
    ok &= _agrees(rep, want)
    st = rep["checker"].get("stages", {})
    check_s = st.get("checks", 0) + st.get("witnesses", 0)
    cmp = _compare(run, master, driver_memory)
    print(f"   bare scan+group-by {cmp['cold_bare']:6.1f} s   checks+witnesses/bare {check_s / cmp['cold_bare']:4.1f}x   "
          f"(each the first work of a fresh JVM)   {_load()}", flush=True)
    print(f"   in one warm session: checks+witnesses {cmp['warm_checks']:6.1f} s, bare {cmp['warm_bare']:6.1f} s, "
          f"{cmp['warm_checks'] / cmp['warm_bare']:4.1f}x   {_load()}", flush=True)
    return ok


# In a process of its own (a fresh driver JVM: PySpark keeps one JVM per
# process across sessions): the bare scan as the session's first job (cold, as
# the checks ran above), then the bare scan and the checks twice each, warm.
COMPARE = """
import json, sys
sys.path.insert(0, sys.argv[4])
from checker_throughput import bare
import checkers.spark as engine
from checkers.common import Settings
from checkers.session import new_session, stop_session
spark = new_session(sys.argv[2], {"spark.driver.memory": sys.argv[3]})
path = sys.argv[1]
cold = bare(spark, path)
warm = min(bare(spark, path) for _ in range(2))
checks = []
for _ in range(2):
    t = {}
    engine.analyze_runs(spark, path, Settings(), t)
    checks.append(t["checks"] + t["witnesses"])
stop_session(spark)
print(json.dumps({"cold_bare": cold, "warm_bare": warm, "warm_checks": min(checks)}), flush=True)
"""


def _compare(run: Path, master: str, driver_memory: str) -> dict[str, float]:
    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-c", COMPARE, str(run / "history.parquet"), master, driver_memory,
                        str(here)], capture_output=True, text=True, cwd=here.parent)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        raise RuntimeError(f"bare scan failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def small(out: Path) -> bool:
    """``kchaos analyze`` wall time on a 12-op history (engine auto): a sample,
    ten sends and the poll that reads them all back (valid: exit 0)."""
    run = out / "small"
    run.mkdir(parents=True, exist_ok=True)
    ops = [{"process": "sampler", "type": "ok", "f": "sample",
            "value": {"controller": 1, "partitions": {"0": {"leader": 1, "isr": [1, 2, 3], "epoch": 0}}}}]
    for i in range(10):
        ops += [{"process": 0, "type": "invoke", "f": "send", "value": [[0, i, None]]},
                {"process": 0, "type": "ok", "f": "send", "value": [[0, i, i]]}]
    ops += [{"process": 1, "type": "invoke", "f": "poll", "value": None},
            {"process": 1, "type": "ok", "f": "poll", "value": {"0": [[i, i] for i in range(10)]}}]
    with open(run / "history.jsonl", "w") as fh:
        fh.write(json.dumps({"kchaos-history": 2}) + "\n")
        for k, op in enumerate(ops):
            fh.write(json.dumps({"index": k, "time": k * 1000, **op}) + "\n")
    kchaos = Path(sys.executable).with_name("kchaos")
    t0 = time.monotonic()
    r = subprocess.run([str(kchaos), "analyze", str(run)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    engine = json.loads((run / "results.json").read_text())["checker"]
    print(f"12-op history: kchaos analyze {wall:5.1f} s (exit {r.returncode}, engine {engine.get('engine')}, "
          f"{engine.get('chosen')})   {_load()}")
    return r.returncode == 0


def threshold(out: Path, master: str, sizes: list[int]) -> None:
    """Reference vs Spark (its start included, as auto would pay it)."""
    import checkers
    for n in sizes:
        run, info, _ = make_run(n, out)
        from history.parquet import history_to_parquet
        history_to_parquet(run / "history.jsonl", run / "history.parquet")
        t0 = time.monotonic()
        ref = checkers.check(run / "history.parquet", {"engine": "reference"})
        t_ref = time.monotonic() - t0
        t0 = time.monotonic()
        sp = checkers.check(run / "history.parquet", {"engine": "spark", "spark_master": master})
        t_sp = time.monotonic() - t0
        same = found(ref) == found(sp)
        print(f"{info['ops']:>9,} ops  reference {t_ref:6.1f} s   spark (with start) {t_sp:6.1f} s   "
              f"agree {same}   {_load()}", flush=True)
        if not same:
            print(f"   reference {found(ref)}\n   spark     {found(sp)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the run folders")
    ap.add_argument("--small", action="store_true", help="also time kchaos analyze on a 12-op history")
    ap.add_argument("--threshold", type=int, nargs="*", default=None, metavar="OPS",
                    help="also time reference vs Spark at these sizes (default 5k 20k 50k 100k 200k)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="kchaos-bench-")
    out = args.dir or Path(tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    ok = True
    try:
        if args.small:
            ok &= small(out)
        if args.threshold is not None:
            threshold(out, args.master, args.threshold or [5_000, 20_000, 50_000, 100_000, 200_000])
        for n in args.ops:
            ok &= one(n, out, args.master, args.driver_memory)
    finally:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
