"""Transactional histories of a correct Kafka, simulated, and transaction
anomalies injected into them (the txn types of checkers/txn.py).

The simulation keeps one log per partition of entries (value, txn id or None,
state), state "committed", "aborted" or "open", and commit markers, which
take an offset and are never returned. Processes:

* txn processes (2-3): a transactional producer that is also an assign-mode
  consumer of every partition, read_committed or read_uncommitted. A txn op is
  invoked, then its micro-ops run one per step, interleaved with everyone
  else's (a send appends an open entry: its offset is the delivery report's;
  a poll reads from the consumer's positions), then it completes: ok
  (committed: entries committed, a marker per partition written), fail
  (aborted, markers; ``abort`` when chosen) or info (committed or aborted at
  random, markers; the process retires, a new number takes over). After an
  abort the consumer rewinds to where the txn started reading, as
  ``workloads/txn.py`` does.
* plain consumers (1-2): polls, read_committed or read_uncommitted.
* one plain producer: ok sends (a committed entry each), some failing.

A read_committed read stops at the first open entry (the last stable offset)
and skips aborted entries and markers; a read_uncommitted one skips only
markers. The final drain (optional) reads every partition's committed entries
read_committed, after every txn completed. A correct history: no anomaly
that is not allowed; G0, int-send-skip (allowed) may occur.

``inject_txn`` returns a copy with one anomaly of an ``INJECTED`` type: a
mutation of the history where it has a place (an aborted txn's value read, a
txn reading its own write, a write removed from the drain, ...), else a small
self-contained scenario appended at the end (chk_gen_txn_scenarios.py).
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from chk_gen_txn_scenarios import DRAIN_BASE, INJECTED, MS, RC, RU, append_scenario  # noqa: F401 - INJECTED: the types to plant

Op = dict[str, Any]


@dataclass(frozen=True)
class TxnParams:
    seed: int
    partitions: int
    txn_procs: int
    consumers: int
    steps: int
    drain: bool
    p_abort: float
    p_info: float
    ru: bool          # some readers are read_uncommitted


@st.composite
def txn_params(draw: Any) -> TxnParams:
    return TxnParams(seed=draw(st.integers(0, 2**32 - 1)), partitions=draw(st.integers(1, 3)),
                     txn_procs=draw(st.integers(1, 3)), consumers=draw(st.integers(0, 2)),
                     steps=draw(st.integers(0, 120)), drain=draw(st.booleans()),
                     p_abort=draw(st.sampled_from([0.0, 0.2, 0.4])), p_info=draw(st.sampled_from([0.0, 0.1])),
                     ru=draw(st.booleans()))


def random_txn_params(rng: random.Random) -> TxnParams:
    return TxnParams(seed=rng.randrange(2**32), partitions=rng.randint(1, 3), txn_procs=rng.randint(1, 3),
                     consumers=rng.randint(0, 2), steps=rng.randint(0, 120), drain=rng.random() < 0.7,
                     p_abort=rng.choice([0.0, 0.2, 0.4]), p_info=rng.choice([0.0, 0.1]), ru=rng.random() < 0.5)


@dataclass
class Entry:
    value: int | None         # None: a commit/abort marker
    txn: int | None
    state: str                # "committed" | "aborted" | "open" | "marker"


class TxnSim:
    def __init__(self, p: TxnParams):
        self.p = p
        self.rng = random.Random(p.seed)
        self.ops: list[Op] = []
        self.t = 0
        self.logs: dict[int, list[Entry]] = {q: [] for q in range(p.partitions)}
        self.counter = {q: 0 for q in range(p.partitions)}
        self.next_proc = 0
        self.iso: dict[int, str] = {}
        self.pos: dict[int, dict[int, int]] = {}
        self.txn_procs: list[int] = []
        self.consumers: list[int] = []
        self.active: dict[int, dict[str, Any]] = {}       # txn process -> its running txn
        self.gen: dict[int, int] = {}                      # txn process -> producer instance number
        for _ in range(p.txn_procs):
            self.txn_procs.append(self.new_proc())
        for _ in range(p.consumers):
            self.consumers.append(self.new_proc())
        self.producer = self.new_proc()

    def new_proc(self) -> int:
        proc = self.next_proc
        self.next_proc += 1
        self.iso[proc] = RU if self.p.ru and self.rng.random() < 0.4 else RC
        self.pos[proc] = {q: 0 for q in range(self.p.partitions)}
        return proc

    def emit(self, process: Any, type: str, f: str, value: Any, **kw: Any) -> Op:
        self.t += self.rng.randint(1, 5) * MS
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f,
              "value": value, **kw}
        self.ops.append(op)
        return op

    def fresh(self, q: int) -> int:
        self.counter[q] += 1
        return self.counter[q]

    # -- reads --------------------------------------------------------------------------
    def read(self, proc: int) -> dict[str, list[list[int]]]:
        """One poll of every partition from the consumer's positions."""
        out = {}
        for q in range(self.p.partitions):
            log, pos, got = self.logs[q], self.pos[proc][q], []
            n = self.rng.randint(0, 3)
            while pos < len(log) and len(got) < n:
                e = log[pos]
                if e.state == "open" and self.iso[proc] == RC:
                    break                       # the last stable offset
                if e.state != "marker" and (e.state != "aborted" or self.iso[proc] == RU):
                    got.append([pos, e.value])
                pos += 1
            self.pos[proc][q] = pos
            out[str(q)] = got
        return out

    # -- txns ---------------------------------------------------------------------------
    def start_txn(self, proc: int) -> None:
        n = self.rng.randint(1, 4)
        mops = [["send", self.rng.randrange(self.p.partitions)] if self.rng.random() < 0.6 else ["poll"]
                for _ in range(n)]
        for m in mops:
            if m[0] == "send":
                m.append(self.fresh(m[1]))
        r = self.rng.random()
        outcome = "fail" if r < self.p.p_abort else "info" if r < self.p.p_abort + self.p.p_info else "ok"
        kw: dict[str, Any] = {"isolation": self.iso[proc], "producer": f"t{proc}.{self.gen.setdefault(proc, 0)}"}
        if outcome == "fail" and self.rng.random() < 0.7:
            kw["abort"] = True
        inv = self.emit(proc, "invoke", "txn", [list(m) for m in mops], **kw)
        self.active[proc] = {"id": inv["index"], "mops": mops, "done": [], "outcome": outcome, "kw": kw,
                             "start": dict(self.pos[proc]), "written": set()}

    def step_txn(self, proc: int) -> None:
        t = self.active[proc]
        if len(t["done"]) < len(t["mops"]):
            m = t["mops"][len(t["done"])]
            if m[0] == "send":
                q, v = m[1], m[2]
                self.logs[q].append(Entry(v, t["id"], "open"))
                t["written"].add(q)
                t["done"].append(["send", q, v, len(self.logs[q]) - 1])
            else:
                t["done"].append(["poll", self.read(proc)])
            return
        outcome = t["outcome"]
        commit = outcome == "ok" or (outcome == "info" and self.rng.random() < 0.5)
        for q in sorted(t["written"]):
            for e in self.logs[q]:
                if e.txn == t["id"] and e.state == "open":
                    e.state = "committed" if commit else "aborted"
            self.logs[q].append(Entry(None, t["id"], "marker"))
        del self.active[proc]
        self.emit(proc, outcome, "txn", t["done"], **t["kw"])
        if outcome == "fail":
            self.pos[proc] = t["start"]                  # rewind after an abort
        if outcome == "info":                            # the process retires
            self.txn_procs.remove(proc)
            self.txn_procs.append(self.new_proc())

    # -- plain ops ------------------------------------------------------------------------
    def plain_send(self) -> None:
        q = self.rng.randrange(self.p.partitions)
        v = self.fresh(q)
        self.emit(self.producer, "invoke", "send", [[q, v, None]])
        if self.rng.random() < 0.1:
            self.emit(self.producer, "fail", "send", [[q, v, None]])
            return
        self.logs[q].append(Entry(v, None, "committed"))
        self.emit(self.producer, "ok", "send", [[q, v, len(self.logs[q]) - 1]])

    def poll(self, proc: int) -> None:
        kw = {"isolation": self.iso[proc]}
        self.emit(proc, "invoke", "poll", None, **kw)
        self.emit(proc, "ok", "poll", self.read(proc), **kw)

    def drain(self) -> None:
        for q in range(self.p.partitions):
            proc, log = DRAIN_BASE + q, self.logs[q]
            got = [[o, e.value] for o, e in enumerate(log) if e.state == "committed"]
            self.emit(proc, "invoke", "assign", [q])
            self.emit(proc, "ok", "assign", [q])
            for i in range(0, max(1, len(got)), 5):
                self.emit(proc, "invoke", "poll", None, drain=True)
                self.emit(proc, "ok", "poll", {str(q): got[i: i + 5]}, drain=True,
                          watermarks={"log_start": 0, "high": len(log), "max_acked": None}, end=len(log))

    def run(self) -> list[Op]:
        for proc in self.consumers:
            parts = list(range(self.p.partitions))
            self.emit(proc, "invoke", "assign", parts)
            self.emit(proc, "ok", "assign", parts)
        for _ in range(self.p.steps):
            r = self.rng.random()
            if r < 0.15:
                self.plain_send()
            elif r < 0.3 and self.consumers:
                self.poll(self.rng.choice(self.consumers))
            else:
                proc = self.rng.choice(self.txn_procs)
                (self.step_txn if proc in self.active else self.start_txn)(proc)
        while self.active:
            self.step_txn(next(iter(self.active)))
        if self.p.drain:
            self.drain()
        return self.ops


def simulate_txn(p: TxnParams) -> list[Op]:
    return TxnSim(p).run()


# ---------------------------------------------------------------- injection

def _txns(ops: list[Op], types: tuple[str, ...] = ("ok", "fail", "info")) -> list[Op]:
    return [o for o in ops if o["f"] == "txn" and o["type"] in types]


def _reads(ops: list[Op]) -> list[tuple[Op, dict]]:
    """(op, poll value) of every ok poll and every txn poll micro-op."""
    out = [(o, o["value"]) for o in ops if o["f"] == "poll" and o["type"] == "ok" and isinstance(o["value"], dict)]
    out += [(o, m[1]) for o in _txns(ops) for m in o["value"] if m[0] == "poll" and len(m) > 1]
    return out


def _drained(ops: list[Op]) -> bool:
    drains = [o for o in ops if o.get("drain") and o["type"] != "invoke"]
    return bool(drains) and all(o["type"] == "ok" for o in drains)


def _rc(op: Op) -> bool:
    return op.get("isolation") != RU


def inject_txn(ops: list[Op], typ: str, rng: random.Random) -> tuple[list[Op], int]:
    """A copy of ops with one anomaly of type typ, and its partition. Other
    anomalies may come along."""
    ops = copy.deepcopy(ops)
    got = _mutate(ops, typ, rng)
    if got is not None:
        return ops, got
    parts = sorted({m[1] for o in _txns(ops) for m in o["value"] if m[0] == "send"} | {0})
    q = rng.choice(parts)
    return append_scenario(ops, typ, q), q


def _mutate(ops: list[Op], typ: str, rng: random.Random) -> int | None:
    """Mutate ops in place to hold one anomaly of typ; its partition, or None when there is no place."""
    if typ == "aborted-read":
        # an aborted value a read_uncommitted read saw: make that reader read_committed
        fails = {(m[1], m[2]) for o in _txns(ops, ("fail",)) for m in o["value"] if m[0] == "send"}
        cands = [(o, p) for o, val in _reads(ops) if not _rc(o) and o["f"] == "poll"
                 for p, rs in val.items() for r in rs if (int(p), r[1]) in fails]
        if not cands:
            return None
        o, p = rng.choice(cands)
        inv = next(x for x in reversed(ops[: o["index"]]) if x["process"] == o["process"] and x["type"] == "invoke")
        for x in (inv, o):
            x.pop("isolation", None)
        return int(p)
    if typ == "precommitted-read":
        cands = [o for o in _txns(ops, ("ok",)) if _rc(o) and any(m[0] == "send" and m[3] is not None
                                                                 for m in o["value"])]
        if not cands:
            return None
        o = rng.choice(cands)
        m = rng.choice([m for m in o["value"] if m[0] == "send" and m[3] is not None])
        o["value"].append(["poll", {str(m[1]): [[m[3], m[2]]]}])
        inv = next(x for x in reversed(ops[: o["index"]]) if x["process"] == o["process"] and x["type"] == "invoke")
        inv["value"].append(["poll"])
        return m[1]
    if typ in ("torn-transaction", "lost-txn-write"):
        if not _drained(ops):
            return None
        need = 2 if typ == "torn-transaction" else 1
        cands = [o for o in _txns(ops, ("ok",)) if len({(m[1], m[2]) for m in o["value"] if m[0] == "send"}) >= need]
        if not cands:
            return None
        o = rng.choice(cands)
        q, v = rng.choice([(m[1], m[2]) for m in o["value"] if m[0] == "send"])
        for _, val in _reads(ops):               # gone: from the drain and every read
            if str(q) in val:
                val[str(q)] = [r for r in val[str(q)] if r[1] != v]
        return q
    if typ == "int-poll-skip":
        cands = []
        for o in _txns(ops):
            for m in o["value"]:
                if m[0] == "poll" and len(m) > 1:
                    cands += [(o, m, p) for p, rs in m[1].items() if len(rs) >= 3]
        rng.shuffle(cands)
        for o, m, p in cands:
            mid = m[1][p].pop(1)
            known = {(int(pp), r[0]) for _, val in _reads(ops) for pp, rs in val.items() for r in rs}
            hidden = {(x[1], x[2]) for t in _txns(ops, ("fail", "info")) for x in t["value"] if x[0] == "send"}
            if (int(p), mid[0]) in known and (not _rc(o) or (int(p), mid[1]) not in hidden):
                return int(p)
            m[1][p].insert(1, mid)
        return None
    if typ == "int-nonmonotonic-poll":
        cands = [(o, m, p) for o in _txns(ops) for m in o["value"] if m[0] == "poll" and len(m) > 1
                 for p, rs in m[1].items() if rs]
        if not cands:
            return None
        o, m, p = rng.choice(cands)
        m[1][p].append(list(m[1][p][0]))
        return int(p)
    if typ == "int-nonmonotonic-send":
        cands = []
        for o in _txns(ops):
            by: dict[int, list] = {}
            for m in o["value"]:
                if m[0] == "send" and m[3] is not None:
                    by.setdefault(m[1], []).append(m)
            cands += [ms for ms in by.values() if len(ms) >= 2]
        if not cands:
            return None
        ms = rng.choice(cands)
        ms[0][3], ms[1][3] = ms[1][3], ms[0][3]
        return ms[0][1]
    return None
