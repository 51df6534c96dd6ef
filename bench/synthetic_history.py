"""A synthetic history of N ops with known anomalies, for bench/checker_throughput.py.

Built in columns (numpy, pyarrow) because the benchmark's sizes (1M and 10M
ops) would take longer to generate op by op than to check: first the paired
ops (``generate``, in PARQUET_SCHEMA), then the history.jsonl a run would have
left of them (``to_jsonl``), so the benchmark times ``kchaos analyze`` from
the file a run leaves. ``expected`` is what the checkers must find in it.
"""
from __future__ import annotations

import json
import sys
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


def _text(a: np.ndarray | pa.Array) -> pa.Array:
    """Numbers as their decimal text, for building JSON in columns."""
    return pc.cast(a if isinstance(a, (pa.Array, pa.ChunkedArray)) else pa.array(a), pa.string())


def _message_lists(offsets: np.ndarray, part: np.ndarray, off: np.ndarray, val: np.ndarray,
                   off_null: np.ndarray | None = None) -> pa.Array:
    """The ``messages`` column: row i holds messages offsets[i]:offsets[i + 1]."""
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
    messages = _message_lists(starts_op, flat_part, flat_off, flat_val, off_null)

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
    j = pc.binary_join_element_wise("[[", _text(flat_part[s_pos]), ",", _text(flat_val[s_pos]), ",",
                                    _text(flat_off[s_pos]), "]]", "")
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
    trip = pc.binary_join_element_wise("[", _text(p), ",", _text(v), ",", pc.fill_null(_text(o), "null"), "]", "")
    trip_inv = pc.binary_join_element_wise("[", _text(p), ",", _text(v), ",null]", "")
    pair = pc.binary_join_element_wise("[", _text(o), ",", _text(v), "]", "")
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
    poll_v = pc.binary_join_element_wise('{"', _text(p0), '":[', joined(pair), "]}", "")
    is_send = pa.array(f == "send")
    comp_v = pc.if_else(is_send, send_v, poll_v)
    inv_v = pc.if_else(is_send, send_iv, pa.scalar("null"))
    head = lambda i, t: pc.binary_join_element_wise(  # noqa: E731
        '{"index":', _text(i), ',"time":', _text(t), ',"process":', _text(col["process"]), ',"type":"', "", "")
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
