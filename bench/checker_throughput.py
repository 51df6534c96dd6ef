"""Checker throughput: the full Spark checker suite against a bare scan.

Generates synthetic histories of 1M and 10M ops straight to Parquet (the
checkers' schema, vectorised with numpy/pyarrow: Python per-op code would
take longer than the check), with a sprinkle of injected anomalies, then in
one Spark session times

* bare: read the Parquet, explode the messages, group by (partition, offset);
* full: ``checkers.check`` on the same file (every anomaly, stats, witnesses).

and prints ops/s and full/bare. Targets: 10M ops in <= 30 s, <= 3x bare.

    .venv/bin/python bench/checker_throughput.py            # 1M and 10M
    .venv/bin/python bench/checker_throughput.py --ops 1000000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkers.model import MESSAGE_TYPE, PARQUET_SCHEMA, SAMPLE_TYPE  # noqa: E402

PARTITIONS = 8
PRODUCERS = 24
US = 1_000


def _s(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def _msgs(offsets: np.ndarray, part: np.ndarray, off: np.ndarray, val: np.ndarray) -> pa.Array:
    inner = pa.StructArray.from_arrays([pa.array(part, pa.int32()), pa.array(off, pa.int64()),
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
    messages = _msgs(starts_op, flat_part, flat_off, flat_val)

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

    table = pa.table({
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
    }, schema=PARQUET_SCHEMA)
    pq.write_table(table, path, row_group_size=1_000_000)
    return {"ops": n_total, "messages": int(lens.sum()), **injected}


def bare(spark, path: Path) -> float:
    from pyspark.sql import functions as F
    t0 = time.monotonic()
    (spark.read.parquet(str(path)).select(F.explode("messages").alias("m"))
     .groupBy("m.partition", "m.offset").count().agg(F.sum("count")).collect())
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="3g")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the Parquet files")
    args = ap.parse_args()
    import checkers
    from checkers.session import new_session

    tmp = tempfile.TemporaryDirectory(prefix="kchaos-bench-")
    out = args.dir or Path(tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    spark = new_session(args.master, {"spark.driver.memory": args.driver_memory})
    try:
        # Warm up first (JIT, code generation, Python workers) on a small
        # history, so neither side of the ratio pays the JVM's first-run costs.
        warm = out / "warmup.parquet"
        generate(100_000, warm)
        bare(spark, warm)
        checkers.check(warm, {"engine": "spark", "spark_master": args.master}, spark=spark)
        for n in args.ops:
            path = out / f"history-{n}.parquet"
            t0 = time.monotonic()
            info = generate(n, path)
            gen = time.monotonic() - t0
            bare(spark, path)                      # warm the file cache
            b = bare(spark, path)
            t0 = time.monotonic()
            res = checkers.check(path, {"engine": "spark", "spark_master": args.master}, spark=spark)
            full = time.monotonic() - t0
            counts = {t: c for t, c, _ in checkers.summary(res) if c}
            print(f"{info['ops']:>11,} ops  {info['messages']:>11,} messages  generated in {gen:5.1f} s")
            print(f"   bare scan+group-by {b:6.1f} s   full checkers {full:6.1f} s   "
                  f"{info['ops'] / full:>12,.0f} ops/s   full/bare {full / b:4.2f}x")
            print(f"   verdict {res.valid}  anomalies {counts}  errors {res.errors}  "
                  f"(load average {os.getloadavg()[0]:.1f})")
            sys.stdout.flush()
    finally:
        spark.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
