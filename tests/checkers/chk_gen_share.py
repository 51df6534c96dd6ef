"""Share-group histories of a correct Kafka, simulated, and share anomalies
injected into them (the share counterpart of chk_gen_groups).

One producer appends to every partition (every send acknowledged). Members of
share group "sg" (lock ``LOCK_MS``, delivery limit ``limit``) take turns: a
share-poll acquires up to three available records (each delivery count one
higher than the last), the member may hold them past their lock (they become
available again, and its marks then come back fail), marks each accept,
release or reject, and a share-commit sends the marks: Kafka applies those of
records still locked to the member (accept and reject archive, release makes
the record available, or archives it at the limit) and answers ok, sometimes
info. A member may crash after a poll: it closes, and Kafka releases what it
held. At the end a drain waits out every lock, accepts everything left, and
the share-end says complete; the plain drain reads every partition. So a
correct history has no share anomaly.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Op = dict[str, Any]
MS = 1_000_000
G = "sg"
LOCK_MS = 1000
SHARE_TYPES = ("lost-share-record", "share-accepted-redelivered", "share-not-redelivered",
               "share-double-delivery", "share-count-decrease")


@dataclass(frozen=True)
class SParams:
    seed: int
    partitions: int
    members: int
    steps: int
    limit: int
    p_hold: float
    p_crash: float
    p_info: float


def sparams() -> st.SearchStrategy[SParams]:
    return st.builds(SParams, st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 3), st.integers(5, 40),
                     st.integers(2, 4), st.sampled_from([0.0, 0.2]), st.sampled_from([0.0, 0.15]),
                     st.sampled_from([0.0, 0.2]))


class _Sim:
    def __init__(self, p: SParams):
        self.p, self.rng = p, random.Random(p.seed)
        self.ops: list[Op] = []
        self.t = 0
        self.next_offset = [0] * p.partitions
        self.values: dict[tuple[int, int], int] = {}
        self.count: dict[tuple[int, int], int] = {}
        self.state: dict[tuple[int, int], Any] = {}      # "available" | "archived" | (process, acquired at)
        self.next_process = 100

    def add(self, process: int, type: str, f: str, value: Any, dt: int = MS, **kw: Any) -> Op:
        self.t += dt
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f, "value": value, **kw}
        self.ops.append(op)
        return op

    def expire(self) -> None:
        for r, s in self.state.items():
            if isinstance(s, tuple) and s[1] + LOCK_MS * MS <= self.t:
                self.state[r] = "available" if self.count[r] < self.p.limit else "archived"

    def send(self) -> None:
        part = self.rng.randrange(self.p.partitions)
        o = self.next_offset[part]
        self.next_offset[part] += 1
        v = o + 1
        self.values[(part, o)], self.count[(part, o)], self.state[(part, o)] = v, 0, "available"
        self.add(0, "invoke", "send", [[part, v, None]])
        self.add(0, "ok", "send", [[part, v, o]])

    def subscribe(self, q: int, **kw: Any) -> None:
        self.add(q, "invoke", "share-subscribe", "topic", group=G, **kw)
        self.add(q, "ok", "share-subscribe", {"topic": "topic", "lock_ms": LOCK_MS,
                                             "delivery_count_limit": self.p.limit}, group=G, **kw)

    def poll(self, q: int, most: int = 3, **kw: Any) -> list[tuple[int, int]]:
        self.expire()
        self.add(q, "invoke", "share-poll", None, group=G, **kw)
        got = [r for r in sorted(self.state) if self.state[r] == "available"][:most]
        out: dict[str, list] = {}
        for r in got:
            self.count[r] += 1
            self.state[r] = (q, self.t + MS // 2)
            out.setdefault(str(r[0]), []).append([r[1], self.values[r], self.count[r]])
        self.add(q, "ok", "share-poll", out, group=G, **kw)
        return got

    def ack_commit(self, q: int, got: list[tuple[int, int]], kinds: dict[tuple[int, int], str], **kw: Any) -> None:
        value: dict[str, dict[str, list[int]]] = {}
        for r in got:
            value.setdefault(kinds[r], {}).setdefault(str(r[0]), []).append(r[1])
        self.add(q, "invoke", "share-ack", None, group=G, **kw)
        self.add(q, "ok", "share-ack", value, group=G, **kw)
        self.expire()
        self.add(q, "invoke", "share-commit", None, group=G, **kw)
        applied: dict[str, dict[str, list[int]]] = {}
        failed: dict[str, dict[str, list[int]]] = {}
        for r in got:
            s = self.state[r]
            mine = isinstance(s, tuple) and s[0] == q
            if mine:
                k = kinds[r]
                self.state[r] = ("available" if k == "release" and self.count[r] < self.p.limit else "archived")
            (applied if mine else failed).setdefault(kinds[r], {}).setdefault(str(r[0]), []).append(r[1])
        self.add(q, "ok", "share-commit", {str(r[0]): None for r in got}, group=G, **kw)
        if applied:
            self.add(q, "info" if self.rng.random() < self.p.p_info else "ok", "share-acked", applied, group=G, **kw)
        if failed:
            self.add(q, "fail", "share-acked", failed, group=G, error="INVALID_RECORD_STATE", **kw)

    def run(self) -> list[Op]:
        p, rng = self.p, self.rng
        members = list(range(5, 5 + p.members))
        for q in members:
            self.subscribe(q)
        for _ in range(p.steps):
            if rng.random() < 0.4:
                self.send()
                continue
            i = rng.randrange(len(members))
            q = members[i]
            got = self.poll(q)
            if got and rng.random() < p.p_crash:       # closes: Kafka releases what it held
                for r in got:
                    if isinstance(self.state[r], tuple) and self.state[r][0] == q:
                        self.state[r] = "available" if self.count[r] < p.limit else "archived"
                members[i] = self.next_process
                self.next_process += 1
                self.subscribe(members[i])
                continue
            if got and rng.random() < p.p_hold:
                self.add(q, "invoke", "share-hold", 2 * LOCK_MS / 1000 + 2, group=G)
                self.add(q, "ok", "share-hold", 2 * LOCK_MS / 1000 + 2, group=G, dt=(2 * LOCK_MS + 2000) * MS)
            kinds = {r: rng.choice(("accept", "accept", "release", "reject")) for r in got}
            self.ack_commit(q, got, kinds)
        self.t += (LOCK_MS + 3000) * MS       # the drain waits out every lock
        self.subscribe(20, drain=True)
        while got := self.poll(20, most=10, drain=True):
            self.ack_commit(20, got, {r: "accept" for r in got}, drain=True)
        self.add(20, "ok", "share-end", {"complete": True, "why": "quiet past the lock"}, group=G, drain=True)
        for part in range(p.partitions):
            self.add(30 + part, "invoke", "assign", [part])
            self.add(30 + part, "ok", "assign", [part])
            self.add(30 + part, "invoke", "poll", None, drain=True)
            self.add(30 + part, "ok", "poll", {str(part): [[o, o + 1] for o in range(self.next_offset[part])]},
                     drain=True)
        return self.ops


def simulate(p: SParams) -> list[Op]:
    return _Sim(p).run()


def _deliveries(ops: list[Op]) -> list[tuple[int, int, int, list]]:
    """(op position, partition, offset, the record's [offset, value, count]) of every delivery."""
    return [(i, int(k), r[0], r) for i, op in enumerate(ops) if op["f"] == "share-poll" and op["type"] == "ok"
            for k, rs in op["value"].items() for r in rs]


def _reindex(ops: list[Op]) -> list[Op]:
    ops.sort(key=lambda o: o["time"])
    for i, op in enumerate(ops):
        op["index"] = i
    return ops


def _released(ops: list[Op], i: int, part: int, off: int) -> bool:
    """Whether the delivery at position ``i`` was certainly given back: its member
    held it past the lock, or an ok answer of that member released it."""
    q = ops[i]["process"]
    after = [op for op in ops[i + 1:] if op["process"] == q]
    if after and after[0]["f"] == "share-hold":
        return True
    nxt = next((j for j, op in enumerate(after) if op["f"] == "share-poll"), len(after))
    after = after[:nxt]              # the answers to this delivery's marks come before the next poll
    return any(op["f"] == "share-acked" and op["type"] == "ok"
               and off in (op["value"].get("release") or {}).get(str(part), []) for op in after)


def _lock_window(ops: list[Op], i: int) -> int:
    """The end of the lock window of the deliveries of the share-poll completed at
    position ``i`` (checkers/share.py), or 0 when its member sends nothing after it."""
    q = ops[i]["process"]
    mine = [op for op in ops if op["process"] == q]
    polls = [op for op in mine if op["f"] == "share-poll" and op["type"] == "invoke" and op["index"] < ops[i]["index"]]
    acquired_after = polls[-2]["time"] if len(polls) >= 2 else polls[-1]["time"]
    sent = [op["time"] for op in mine if op["f"] in ("share-poll", "share-commit") and op["type"] == "invoke"
            and op["time"] > ops[i]["time"]]
    return min(sent[0], acquired_after + LOCK_MS * MS) if sent else 0


def inject(ops: list[Op], typ: str, rng: random.Random, limit: int) -> tuple[list[Op], int] | None:
    """``ops`` with one anomaly of ``typ`` planted, and its partition; None when the history has no place for it."""
    ops = copy.deepcopy(ops)
    ds = _deliveries(ops)
    if not ds:
        return None
    if typ == "lost-share-record":
        _, part, off, _ = rng.choice(ds)
        for op in ops:
            if op["f"] in ("share-poll", "share-ack", "share-acked") and isinstance(op["value"], dict):
                groups = op["value"].values() if op["f"] != "share-poll" else [op["value"]]
                for g in groups:
                    if str(part) in g:
                        g[str(part)] = [x for x in g[str(part)] if (x[0] if isinstance(x, list) else x) != off]
        return ops, part
    if typ == "share-accepted-redelivered":
        acc = [(op, int(k), o) for op in ops if op["f"] == "share-acked" and op["type"] == "ok"
               for k, offs in (op["value"].get("accept") or {}).items() for o in offs]
        if not acc:
            return None
        op, part, off = rng.choice(acc)
        end = next(o for o in ops if o["f"] == "share-end")
        value = next(r[1] for _, pp, oo, r in ds if (pp, oo) == (part, off))
        ops += [{"time": end["time"] - 2, "process": 99, "type": "invoke", "f": "share-poll", "value": None,
                 "group": G},
                {"time": end["time"] - 1, "process": 99, "type": "ok", "f": "share-poll", "group": G,
                 "value": {str(part): [[off, value, 1 + max(r[2] for _, pp, oo, r in ds if (pp, oo) == (part, off))]]}}]
        return _reindex(ops), part
    by_record: dict[tuple[int, int], list] = {}
    for i, part, off, r in ds:
        by_record.setdefault((part, off), []).append((i, r))
    if typ in ("share-not-redelivered", "share-count-decrease"):
        multi = [(k, v) for k, v in by_record.items() if len(v) >= 2]
        if typ == "share-not-redelivered":
            multi = [(k, v) for k, v in multi if v[0][1][2] < limit and _released(ops, v[0][0], *k)]
        if not multi:
            return None
        (part, _), v = rng.choice(multi)
        first, second = v[0][1], v[1][1]
        if typ == "share-not-redelivered":
            second[2] = first[2]
        else:
            first[2] = second[2] + 1
        return ops, part
    if typ == "share-double-delivery":
        held = [d for d in ds if _lock_window(ops, d[0]) > ops[d[0]]["time"] + 2000]
        if not held:
            return None
        i, part, off, r = rng.choice(held)
        t = ops[i]["time"]
        ops += [{"time": t + 1000, "process": 98, "type": "invoke", "f": "share-poll", "value": None, "group": G},
                {"time": t + 2000, "process": 98, "type": "ok", "f": "share-poll", "group": G,
                 "value": {str(part): [[off, r[1], r[2] + 1]]}}]
        return _reindex(ops), part
    raise ValueError(typ)
