"""Histories of a correct Kafka, simulated, and anomalies injected into them.

The simulation keeps one log per partition. A send takes effect at its
completion (inside its invoke-completion interval, so offsets are linearizable);
info sends take effect or not at random; fail sends never do. Assign-mode
consumers read contiguously from their position, and a partition they did not
hold before starts at 0, so every offset below a read offset was read by
someone (no lost writes in a correct history). Subscribe-mode consumers may be
rewound (rebalances), which is allowed. A poll that ends in info crashes its
process: a new process number takes over, as the runner does. Samples only
ever move leadership inside the ISR. The final drain (optional) reads every
partition from 0 to its end.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Op = dict[str, Any]
MS = 1_000_000
FRESH = 1_000_000_000   # values no simulated send ever writes


@dataclass(frozen=True)
class Params:
    seed: int
    partitions: int
    clients: int
    steps: int
    mode: str            # "assign" | "subscribe"
    drain: bool
    p_fail: float
    p_info: float


@st.composite
def params(draw: Any) -> Params:
    return Params(seed=draw(st.integers(0, 2**32 - 1)), partitions=draw(st.integers(1, 3)),
                  clients=draw(st.integers(1, 4)), steps=draw(st.integers(0, 80)),
                  mode=draw(st.sampled_from(["assign", "assign", "subscribe"])),
                  drain=draw(st.booleans()), p_fail=draw(st.sampled_from([0.0, 0.1])),
                  p_info=draw(st.sampled_from([0.0, 0.1])))


class Sim:
    def __init__(self, p: Params):
        self.p = p
        self.rng = random.Random(p.seed)
        self.ops: list[Op] = []
        self.t = 0
        self.logs: dict[int, list[int]] = {q: [] for q in range(p.partitions)}
        self.counter = {q: 0 for q in range(p.partitions)}
        self.next_proc = p.clients
        self.procs = list(range(p.clients))
        self.pending: dict[int, Op] = {}
        self.assigned: dict[int, list[int]] = {}
        self.pos: dict[int, dict[int, int]] = {}
        self.brokers = [1, 2, 3]
        self.leader = {q: 1 + q % 3 for q in range(p.partitions)}
        self.open_fault: int | None = None
        self.fault_id = 0

    def emit(self, process: Any, type: str, f: str, value: Any, **kw: Any) -> Op:
        self.t += self.rng.randint(1, 5) * MS
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f,
              "value": value, **kw}
        self.ops.append(op)
        return op

    def invoke(self, proc: int) -> None:
        r = self.rng.random()
        if proc not in self.assigned or r < 0.08:
            parts = sorted(self.rng.sample(range(self.p.partitions), self.rng.randint(1, self.p.partitions)))
            f = "subscribe" if self.p.mode == "subscribe" else "assign"
            self.pending[proc] = self.emit(proc, "invoke", f, parts if f == "assign" else "topic")
            self.pending[proc]["_parts"] = parts
        elif r < 0.55:
            msgs = []
            for _ in range(self.rng.randint(1, 2)):
                q = self.rng.randrange(self.p.partitions)
                self.counter[q] += 1
                msgs.append([q, self.counter[q], None])
            self.pending[proc] = self.emit(proc, "invoke", "send", msgs)
        else:
            self.pending[proc] = self.emit(proc, "invoke", "poll", None)

    def complete(self, proc: int) -> None:
        inv = self.pending.pop(proc)
        f, r = inv["f"], self.rng.random()
        typ = "fail" if r < self.p.p_fail else "info" if r < self.p.p_fail + self.p.p_info else "ok"
        if f in ("assign", "subscribe"):
            parts = inv.pop("_parts")
            if typ != "fail":
                old = self.pos.get(proc, {})
                if f == "subscribe":
                    self.pos[proc] = {q: self.rng.randint(0, old.get(q, 0)) for q in parts}
                else:
                    self.pos[proc] = {q: old.get(q, 0) for q in parts}
                self.assigned[proc] = parts
            self.emit(proc, typ, f, inv["value"])
        elif f == "send":
            msgs = [list(m) for m in inv["value"]]
            if typ == "ok" or (typ == "info" and self.rng.random() < 0.5):
                for m in msgs:
                    self.logs[m[0]].append(m[1])
                    if typ == "ok":
                        m[2] = len(self.logs[m[0]]) - 1
            self.emit(proc, typ, "send", msgs)
        else:
            if typ != "ok":
                self.emit(proc, typ, "poll", None)
                if typ == "info":
                    self.crash(proc)
                return
            value = {}
            for q in self.assigned.get(proc, []):
                start = self.pos[proc][q]
                end = min(len(self.logs[q]), start + self.rng.randint(0, 3))
                value[str(q)] = [[o, self.logs[q][o]] for o in range(start, end)]
                self.pos[proc][q] = end
            self.emit(proc, "ok", "poll", value)

    def crash(self, proc: int) -> None:
        self.procs.remove(proc)
        self.assigned.pop(proc, None)
        self.pos.pop(proc, None)
        self.procs.append(self.next_proc)
        self.next_proc += 1

    def sample(self) -> None:
        parts = {}
        for q in range(self.p.partitions):
            if self.rng.random() < 0.2:
                self.leader[q] = self.rng.choice(self.brokers)
            parts[str(q)] = {"leader": self.leader[q], "isr": list(self.brokers), "epoch": 0}
        self.emit("sampler", "ok", "sample", {"controller": 1, "partitions": parts})

    def nemesis(self) -> None:
        if self.open_fault is None:
            self.fault_id += 1
            self.open_fault = self.fault_id
            f, value = ("start-partition", {"nodes": ["n1"], "fault": self.fault_id}) \
                if self.rng.random() < 0.5 else ("kill", {"nodes": ["n2"], "fault": self.fault_id})
        else:
            f, value = ("stop-partition" if self.rng.random() < 0.5 else "start",
                        {"nodes": ["n1"], "fault": self.open_fault})
            self.open_fault = None
        self.emit("nemesis", "invoke", f, value)
        self.emit("nemesis", "info", f, value)

    def run(self) -> list[Op]:
        for _ in range(self.p.steps):
            r = self.rng.random()
            if r < 0.05:
                self.sample()
            elif r < 0.08:
                self.nemesis()
            else:
                proc = self.rng.choice(self.procs)
                (self.complete if proc in self.pending else self.invoke)(proc)
        for proc in list(self.pending):
            if self.rng.random() < 0.9:
                self.complete(proc)       # the rest stay outstanding: incomplete ops
        if self.p.drain:
            proc = self.next_proc
            self.next_proc += 1
            parts = list(range(self.p.partitions))
            self.emit(proc, "invoke", "assign", parts)
            self.emit(proc, "ok", "assign", parts)
            pos = {q: 0 for q in parts}
            while True:
                self.emit(proc, "invoke", "poll", None, drain=True)
                value = {}
                for q in parts:
                    end = min(len(self.logs[q]), pos[q] + 5)
                    value[str(q)] = [[o, self.logs[q][o]] for o in range(pos[q], end)]
                    pos[q] = end
                self.emit(proc, "ok", "poll", value, drain=True)
                if all(pos[q] == len(self.logs[q]) for q in parts):
                    break
        return self.ops


def simulate(p: Params) -> list[Op]:
    return Sim(p).run()


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
    return [(o, i, m) for o in ops if o["f"] == "send" and o["type"] == "ok"
            for i, m in enumerate(o["value"]) if m[2] is not None]


def _known(ops: list[Op], skip_op: Op | None = None) -> set[tuple[int, int]]:
    k = {(m[0], m[2]) for _, _, m in _acks(ops)}
    for o in _ok_polls(ops):
        if o is not skip_op:
            k |= {(int(q), r[0]) for q, rs in o["value"].items() for r in rs}
    return k


def _fresh_process(ops: list[Op]) -> int:
    return 1 + max([o["process"] for o in ops if isinstance(o["process"], int)] + [0])


def inject(ops: list[Op], typ: str, rng: random.Random) -> tuple[list[Op], int] | None:
    """A copy of ops with one anomaly of type typ, and its partition; None when
    this history offers no place for one. Other anomalies may come along."""
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
        by: dict[tuple, list] = {}
        for o, _, m in acks:
            by.setdefault((o["process"], m[0]), []).append(m)
        cands = [ms for ms in by.values() if len(ms) >= 2]
        if not cands:
            return None
        ms = rng.choice(cands)
        j = rng.randrange(1, len(ms))
        ms[j][2] = ms[j - 1][2]
        return ops, ms[j][0]
    raise ValueError(typ)


def _invoke_time(ops: list[Op], comp: Op) -> int:
    for o in reversed(ops[: comp["index"]]):
        if o["process"] == comp["process"] and o["type"] == "invoke":
            return o["time"]
    return comp["time"]
