"""Self-contained transaction anomalies appended at the end of a history
(chk_gen_txn.inject_txn's fallback where a mutation has no place): fresh
processes, values and offsets above everything the history knows. Besides the
txn types of checkers/txn.py, the chain rules transactions take part in
(docs/design.md, "Transactions"): a consumer that goes on after an abort
instead of reading again (poll-skip), one that goes back between committed
txns (nonmonotonic-poll), and an info txn's delivery offset against an
acknowledged write (inconsistent-offset), the txn settled committed by a read.
"""
from __future__ import annotations

import copy
from typing import Any

from checkers.txn import TXN_TYPES

Op = dict[str, Any]
MS = 1_000_000
FRESH = 1_500_000_000
DRAIN_BASE = 10_000
RC, RU = "read_committed", "read_uncommitted"
# what inject_txn can plant: every txn type, and the chain and offset rules txns take part in
CHAIN_TYPES = ("poll-skip", "nonmonotonic-poll", "inconsistent-offset")
INJECTED = TXN_TYPES + CHAIN_TYPES


def _top(ops: list[Op], q: int) -> int:
    """The highest offset of partition q any op names."""
    offs = [m[3] for o in ops if o["f"] == "txn" and o["type"] != "invoke" for m in o["value"]
            if m[0] == "send" and m[1] == q and m[3] is not None]
    offs += [m[2] for o in ops if o["f"] == "send" and o["type"] != "invoke" for m in o["value"]
             if m[0] == q and m[2] is not None]
    offs += [r[0] for o in ops if o["type"] != "invoke" for val in _poll_values(o) for p, rs in val.items()
             if int(p) == q for r in rs]
    return max(offs + [-1])


def _poll_values(o: Op) -> list[dict]:
    if o["f"] == "poll" and isinstance(o["value"], dict):
        return [o["value"]]
    if o["f"] == "txn":
        return [m[1] for m in o["value"] if m[0] == "poll" and len(m) > 1]
    return []


class _Appender:
    """Self-contained scenarios at the end of a history: fresh processes, values, offsets."""

    def __init__(self, ops: list[Op], q: int):
        self.ops, self.q = ops, q
        self.base = _top(ops, q) + 10
        self.proc = 1 + max([o["process"] for o in ops if isinstance(o["process"], int)] + [DRAIN_BASE + 100])
        self.value = FRESH + 1000 * len(ops)

    def add(self, process: int, type: str, f: str, value: Any, **kw: Any) -> None:
        t = (self.ops[-1]["time"] if self.ops else 0) + MS
        self.ops.append({"index": len(self.ops), "time": t, "process": process, "type": type, "f": f,
                         "value": value, **kw})

    def new(self) -> int:
        self.proc += 1
        return self.proc

    def v(self) -> int:
        self.value += 1
        return self.value

    def begin(self, proc: int, mops: list[list]) -> None:
        self.add(proc, "invoke", "txn", [m[:3] if m[0] == "send" else ["poll"] for m in mops])

    def end(self, proc: int, mops: list[list], type: str = "ok", **kw: Any) -> None:
        self.add(proc, type, "txn", mops, **kw)

    def txn(self, proc: int, mops: list[list], type: str = "ok", **kw: Any) -> None:
        self.add(proc, "invoke", "txn", [m[:3] if m[0] == "send" else ["poll"] for m in mops], **kw)
        self.add(proc, type, "txn", mops, **kw)

    def send(self, v: int, off: int) -> None:
        proc = self.new()
        self.add(proc, "invoke", "send", [[self.q, v, None]])
        self.add(proc, "ok", "send", [[self.q, v, off]])

    def poll(self, reads: list[tuple[int, int]], **kw: Any) -> None:
        proc = self.new()
        self.add(proc, "invoke", "poll", None, **kw)
        self.add(proc, "ok", "poll", {str(self.q): [list(r) for r in reads]}, **kw)


def append_scenario(ops: list[Op], typ: str, q: int) -> list[Op]:
    """``ops`` (a copy) with a scenario of ``typ`` on partition q appended."""
    ops = copy.deepcopy(ops)
    a = _Appender(ops, q)
    b, P = a.base, q
    if typ == "aborted-read":
        v = a.v()
        a.txn(a.new(), [["send", P, v, b]], "fail")
        a.poll([(b, v)])
    elif typ == "precommitted-read":
        v = a.v()
        a.poll([(b, v)])
        a.txn(a.new(), [["send", P, v, b]])
    elif typ == "torn-transaction":
        v1, v2 = a.v(), a.v()
        a.txn(a.new(), [["send", P, v1, b], ["send", P, v2, b + 1]], "info")
        a.add(DRAIN_BASE + 50 + q, "invoke", "poll", None, drain=True)
        a.add(DRAIN_BASE + 50 + q, "ok", "poll", {str(P): [[b, v1]]}, drain=True)
    elif typ == "lost-txn-write":
        v1, v2 = a.v(), a.v()
        a.txn(a.new(), [["send", P, v1, b]])
        a.send(v2, b + 2)
        a.poll([(b + 2, v2)])
    elif typ in ("int-poll-skip", "int-nonmonotonic-poll"):
        vs = [a.v() for _ in range(3)]
        for i, v in enumerate(vs):
            if i == 1 and typ == "int-poll-skip":     # an info txn's value, settled committed by the poll below
                a.txn(a.new(), [["send", P, v, b + i]], "info")
            else:
                a.send(v, b + i)
        a.poll([(b + i, v) for i, v in enumerate(vs)])
        reads = [[(b, vs[0])], [(b + 2, vs[2])]] if typ == "int-poll-skip" else [[(b, vs[0])], [(b, vs[0])]]
        a.txn(a.new(), [["poll", {str(P): [list(r) for r in rs]}] for rs in reads])
    elif typ in ("int-nonmonotonic-send", "int-send-skip"):
        v1, v2, v3 = a.v(), a.v(), a.v()
        proc = a.new()
        if typ == "int-send-skip":
            mops = [["send", P, v1, b], ["send", P, v3, b + 2]]
            a.begin(proc, mops)
            a.send(v2, b + 1)
            a.end(proc, mops)
            a.poll([(b, v1), (b + 1, v2), (b + 2, v3)])
        else:
            a.txn(proc, [["send", P, v1, b + 1], ["send", P, v3, b]], "fail")
    elif typ in ("G0", "G0-process", "G0-realtime"):
        va, vb = a.v(), a.v()
        pa, pb = a.new(), a.new()
        if typ == "G0":                      # interleaved: A, B, A, B
            va2, vb2 = a.v(), a.v()
            ma = [["send", P, va, b], ["send", P, va2, b + 2]]
            mb = [["send", P, vb, b + 1], ["send", P, vb2, b + 3]]
            a.begin(pa, ma)
            a.begin(pb, mb)
            a.end(pa, ma)
            a.end(pb, mb)
            a.poll([(b, va), (b + 1, vb), (b + 2, va2), (b + 3, vb2)])
        else:                                # B completes, then A gets the lower offset
            a.txn(pb, [["send", P, vb, b + 1]])
            a.txn(pb if typ == "G0-process" else pa, [["send", P, va, b]])
            a.poll([(b, va), (b + 1, vb)])
    elif typ in ("poll-skip", "nonmonotonic-poll"):
        vs = [a.v() for _ in range(4)]
        for i, v in enumerate(vs):
            a.send(v, b + i)
        proc = a.new()
        a.txn(proc, [["poll", {str(P): [[b, vs[0]]]}]])
        if typ == "poll-skip":            # an abort, and the consumer goes on past what it read
            a.txn(proc, [["poll", {str(P): [[b + 1, vs[1]], [b + 2, vs[2]]]}]], "fail", abort=True)
            a.txn(proc, [["poll", {str(P): [[b + 3, vs[3]]]}]])
        else:                             # two committed txns, the second goes back
            a.txn(proc, [["poll", {str(P): [[b + 1, vs[1]]]}]])
            a.txn(proc, [["poll", {str(P): [[b + 1, vs[1]], [b + 2, vs[2]]]}]])
    elif typ == "inconsistent-offset":   # the info txn's offset b holds an acked value too
        vt, vo, vr = a.v(), a.v(), a.v()
        a.txn(a.new(), [["send", P, vt, b], ["send", P, vr, b + 1]], "info")
        a.send(vo, b)
        a.poll([(b + 1, vr)])
    elif typ in ("G1c", "G1c-process", "G1c-realtime"):
        va, vb = a.v(), a.v()
        pa, pb = a.new(), a.new()
        if typ == "G1c":                     # each reads the other's write
            ma = [["send", P, va, b], ["poll", {str(P): [[b + 1, vb]]}]]
            mb = [["send", P, vb, b + 1], ["poll", {str(P): [[b, va]]}]]
            a.begin(pa, ma)
            a.begin(pb, mb)
            a.end(pa, ma)
            a.end(pb, mb)
        else:                                # B reads A's write, then A is invoked
            a.txn(pb, [["poll", {str(P): [[b, va]]}], ["send", P, vb, b + 1]])
            a.txn(pb if typ == "G1c-process" else pa, [["send", P, va, b]])
            a.poll([(b, va), (b + 1, vb)])
    else:
        raise ValueError(typ)
    return ops
