"""Anomalies injected into chk_gen's simulated histories (``inject``: a
mutation of the history, one type at a time) and into Kafka's own record of a
simulated run (``inject_run``: an unclean or ELR election in the metadata log
and the replicas' logs)."""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from checkers.kafka_record import fold_changes
from checkers.txn import TXN_TYPES
from chk_gen import FRESH, MS, TOPIC_ID, Op, SimRun, assign_epoch


# ---------------------------------------------------------------- injection

def _copy(ops: list[Op]) -> list[Op]:
    import copy
    return copy.deepcopy(ops)


def _append(ops: list[Op], process: Any, type: str, f: str, value: Any, **kw: Any) -> None:
    t = (ops[-1]["time"] if ops else 0) + MS
    ops.append({"index": len(ops), "time": t, "process": process, "type": type, "f": f,
                "value": value, **kw})


def _ok_polls(ops: list[Op]) -> list[Op]:
    return [o for o in ops if o["f"] == "poll" and o["type"] == "ok" and isinstance(o["value"], dict)]


def _acks(ops: list[Op]) -> list[tuple[Op, int, list]]:
    """Acknowledged messages: of ok sends, and those with offsets of mixed info sends."""
    return [(o, i, m) for o in ops if o["f"] == "send" and o["type"] in ("ok", "info")
            and isinstance(o["process"], int) for i, m in enumerate(o["value"]) if m[2] is not None]


def _known(ops: list[Op], skip_op: Op | None = None) -> set[tuple[int, int]]:
    k = {(m[0], m[2]) for _, _, m in _acks(ops)}
    for o in _ok_polls(ops):
        if o is not skip_op:
            k |= {(int(q), r[0]) for q, rs in o["value"].items() for r in rs}
    return k


def _fresh_process(ops: list[Op]) -> int:
    return 1 + max([o["process"] for o in ops if isinstance(o["process"], int)] + [0])


# Anomaly types other generators inject (chk_gen_groups: consumer groups); these
# histories have no place for them, and the properties here leave them out.
ELSEWHERE = ("commit-backwards", "lost-consumption", "redelivery", "phantom-commit")   # chk_gen_groups
ELSEWHERE += TXN_TYPES      # chk_gen_txn: transactions
ELSEWHERE += ("lost-share-record", "share-accepted-redelivered", "share-not-redelivered",
              "share-double-delivery", "share-count-decrease")     # chk_gen_share: share groups
# From Kafka's record and the fault intervals, with hand-written cases of their own
# (test_chk_hanging.py, test_chk_progress.py)
ELSEWHERE += ("hanging-transaction", "too-little-progress")


def inject(ops: list[Op], typ: str, rng: random.Random) -> tuple[list[Op], int] | None:
    """A copy of ops with one anomaly of type typ, and its partition; None when
    this history offers no place for one. Other anomalies may come along."""
    if typ in ELSEWHERE:
        return None
    ops = _copy(ops)
    if typ == "unclean-election":
        q = rng.randrange(1 + max([m[0] for _, _, m in _acks(ops)] + [0]))
        for leader, isr in ((1, [1]), (2, [2])):
            _append(ops, "sampler", "ok", "sample",
                    {"controller": 1, "partitions": {str(q): {"leader": leader, "isr": isr, "epoch": 9}}})
        return ops, q
    if typ == "unseen":
        ops = [o for o in ops if not o.get("drain")]
        for i, o in enumerate(ops):
            o["index"] = i
        q = rng.randrange(1 + max([m[0] for _, _, m in _acks(ops)] + [0]))
        top = max([off for p, off in _known(ops) if p == q] + [-1])
        proc = _fresh_process(ops)
        _append(ops, proc, "invoke", "send", [[q, FRESH, None]])
        _append(ops, proc, "ok", "send", [[q, FRESH, top + 100]])
        return ops, q
    if typ == "phantom-write":
        read = {(int(q), r[1]) for o in _ok_polls(ops) for q, rs in o["value"].items() for r in rs}
        cands = [(o, m) for o in ops if o["f"] == "send" and o["type"] in ("ok", "info")
                 for m in o["value"] if (m[0], m[1]) in read]
        if not cands:
            return None
        o, m = rng.choice(cands)
        o["type"] = "fail"
        o.pop("outcomes", None)
        for x in o["value"]:
            x[2] = None
        return ops, m[0]
    polls = [(o, q) for o in _ok_polls(ops) if not o.get("drain") for q, rs in o["value"].items() if rs]
    if typ == "inconsistent-offset":
        cands = [(o, q) for o, q in polls if (int(q), o["value"][q][0][0]) in _known(ops, skip_op=o)]
        if not cands:
            return None
        o, q = rng.choice(cands)
        o["value"][q][0][1] = FRESH + 7
        return ops, int(q)
    if typ == "duplicate":
        if not polls:
            return None
        o, q = rng.choice(polls)
        rs = o["value"][q]
        rs.append([rs[-1][0] + 1000, rs[0][1]])
        return ops, int(q)
    if typ == "nonmonotonic-poll":
        if not polls:
            return None
        o, q = rng.choice(polls)
        o["value"][q].append(list(o["value"][q][0]))
        return ops, int(q)
    if typ == "poll-skip":
        cands = [(o, q) for o, q in polls if len(o["value"][q]) >= 3]
        rng.shuffle(cands)
        for o, q in cands:
            mid = o["value"][q][1]
            del o["value"][q][1]
            if (int(q), mid[0]) in _known(ops):
                return ops, int(q)
            o["value"][q].insert(1, mid)
        return None
    if typ == "lost-write":
        reads = [(int(q), r[0], r[1]) for o in _ok_polls(ops) for q, rs in o["value"].items() for r in rs]
        top: dict[int, int] = {}
        for q, off, _ in reads:
            top[q] = max(top.get(q, off), off)
        cands = [(m[0], m[1]) for _, _, m in _acks(ops) if m[2] < top.get(m[0], -1)]
        if not cands:
            return None
        q, v = rng.choice(cands)
        for o in _ok_polls(ops):
            if str(q) in o["value"]:
                o["value"][str(q)] = [r for r in o["value"][str(q)] if r[1] != v]
        return ops, q
    acks = _acks(ops)
    if typ == "nonlinearizable-offset":
        for b, _, mb in rng.sample(acks, len(acks)):
            earlier = [m for a, _, m in acks if a["time"] < _invoke_time(ops, b) and m[0] == mb[0]]
            if earlier:
                mb[2] = min(m[2] for m in earlier)
                return ops, mb[0]
        return None
    if typ == "nonmonotonic-send":
        # per sender (a pipelined producer, else the process) and partition, in send order
        by: dict[tuple, list] = {}
        procs: dict[tuple, set] = {}
        for o, _, m in sorted(acks, key=lambda a: (_invoke_index(ops, a[0]), a[1])):
            key = (("producer", o["producer"]) if o.get("producer") else ("process", o["process"]), m[0])
            by.setdefault(key, []).append(m)
            procs.setdefault(key, set()).add(o["process"])
        cands = [k for k, ms in by.items() if len(ms) >= 2]
        if not cands:
            return None
        across = [k for k in cands if len(procs[k]) > 1]   # a producer's sends on several processes
        ms = by[rng.choice(across if across and rng.random() < 0.7 else cands)]
        j = rng.randrange(1, len(ms))
        ms[j][2] = ms[j - 1][2]
        return ops, ms[j][0]
    raise ValueError(typ)


def _invoke_index(ops: list[Op], comp: Op) -> int:
    for o in reversed(ops[: comp["index"]]):
        if o["process"] == comp["process"] and o["type"] == "invoke":
            return o["index"]
    return comp["index"]


def _invoke_time(ops: list[Op], comp: Op) -> int:
    for o in reversed(ops[: comp["index"]]):
        if o["process"] == comp["process"] and o["type"] == "invoke":
            return o["time"]
    return comp["time"]


# ------------------------------------------------------- injection into Kafka's record

RECORD_TYPES = ("unclean-election", "elr-election")


@dataclass
class Injected:
    """An injected run: its anomaly's partition, and for an unclean election
    with truncation the epoch it began and the values it removed."""

    run: SimRun
    partition: int
    epoch: int | None = None
    removed: frozenset[int] = frozenset()


def _drain_start(ops: list[Op]) -> int:
    """Index of the first op of the final drain (len(ops) without one)."""
    return next((i for i, o in enumerate(ops) if o.get("drain")), len(ops))


def _open_gap(ops: list[Op], at: int, gap: int) -> int:
    """Shift ops[at:] by ``gap`` ns; the time in the middle of the gap."""
    before = ops[at - 1]["time"] if at else 0
    for o in ops[at:]:
        o["time"] += gap
    return before + gap // 2


def _state(run: SimRun, q: int) -> dict[str, Any]:
    return [c for c in fold_changes(run.metadata or [], run.wall_ns_at_zero) if c["partition"] == q][-1]


def _change(run: SimRun, q: int, t: int, **fields: Any) -> None:
    assert run.metadata is not None
    run.metadata.append({"offset": run.metadata[-1]["offset"] + 3, "wall_ms": (run.wall_ns_at_zero + t) // MS,
                         "type": "PartitionChangeRecord",
                         "data": {"partitionId": q, "topicId": TOPIC_ID, "leader": -2, **fields}})


def inject_run(run: SimRun, typ: str, rng: random.Random) -> Injected | None:
    """A copy of ``run`` with one anomaly of type ``typ``; None when it offers no
    place for one. On a run with a metadata log, elections go into the log (an
    unclean election after every ack and before the drain, truncating
    acknowledged writes when the drain completed); else the history's injectors."""
    run = copy.deepcopy(run)
    if typ not in RECORD_TYPES or run.metadata is None:
        if typ == "elr-election":
            return None                    # no metadata log: no ELR
        got = inject(run.ops, typ, rng)
        if got is None:
            return None
        run.ops = got[0]
        return Injected(run, got[1])
    parts = sorted({c["partition"] for c in fold_changes(run.metadata, run.wall_ns_at_zero)})
    at = _drain_start(run.ops)
    t = _open_gap(run.ops, at, 20 * MS)
    if typ == "elr-election":
        q = rng.choice(parts)
        s = _state(run, q)
        leader, others = s["leader"], [b for b in s["replicas"] if b != s["leader"]]
        new = rng.choice(others)
        _change(run, q, t, isr=[leader], eligibleLeaderReplicas=others)
        _change(run, q, t + MS, leader=-1, isr=[], eligibleLeaderReplicas=sorted(others + [leader]))
        _change(run, q, t + 2 * MS, leader=new, isr=[new],
                eligibleLeaderReplicas=sorted(b for b in others + [leader] if b != new))
        _change(run, q, t + 3 * MS, isr=sorted(s["replicas"]), eligibleLeaderReplicas=[], lastKnownElr=[])
        epoch = s["leader_epoch"] + 2
        for r in run.replicas:              # the new leader's epoch starts at its log end
            if r["partition"] == q:
                r["epochs"] = [list(e) for e in assign_epoch([tuple(e) for e in r["epochs"]], epoch,
                                                             r["log_end_offset"])]
        return Injected(run, q)
    # unclean: the ISR shrinks to the leader with no eligible replicas (ELR off or
    # min.insync.replicas=1), the leader dies, an out-of-sync follower is elected
    # and starts its epoch at its own log end S. Acknowledged writes at S and
    # above are gone: the drain (after it) reads only below S.
    drains = [o for o in run.ops[at:] if o.get("drain") and o["type"] != "invoke"]
    complete = bool(drains) and all(o["type"] == "ok" for o in drains)
    acked: dict[int, list[tuple[int, int]]] = {}
    for _, _, m in _acks(run.ops[:at]):
        acked.setdefault(m[0], []).append((m[2], m[1]))
    ends = {r["partition"]: (r["log_start_offset"], r["log_end_offset"]) for r in run.replicas}
    cands = [q for q in parts if complete and any(ends[q][0] <= o < ends[q][1] for o, _ in acked.get(q, []))]
    q = rng.choice(cands) if cands else rng.choice(parts)
    start, end = ends[q]
    cut = end
    if cands and rng.random() < 0.85:
        cut = rng.choice(sorted(o for o, _ in acked[q] if start <= o < end))
    s = _state(run, q)
    leader = s["leader"] if s["leader"] is not None else s["replicas"][0]
    new = rng.choice([b for b in s["replicas"] if b != leader])
    epoch = s["leader_epoch"] + 1
    _change(run, q, t, isr=[leader], eligibleLeaderReplicas=[], lastKnownElr=[])
    _change(run, q, t + MS, leader=new, isr=[new], leaderRecoveryState=1)
    _change(run, q, t + 2 * MS, leaderRecoveryState=0)
    removed = frozenset(v for o, v in acked.get(q, []) if o >= cut)
    for r in run.replicas:
        if r["partition"] != q:
            continue
        r["epochs"] = [list(e) for e in assign_epoch([tuple(e) for e in r["epochs"]], epoch, cut)]
        r["log_end_offset"] = cut
        if r["records"] is not None:
            r["records"] = [x for x in r["records"] if x[0] < cut]
    for o in run.ops[at:]:
        if o.get("drain") and o["type"] == "ok" and str(q) in (o["value"] or {}):
            o["value"][str(q)] = [x for x in o["value"][str(q)] if x[0] < cut]
            o["end"] = min(o.get("end") or 0, cut)
            o["watermarks"] = {**o["watermarks"], "high": cut}
    return Injected(run, q, epoch=epoch, removed=removed)
