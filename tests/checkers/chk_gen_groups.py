"""Consumer-group histories of a correct Kafka, simulated, and group anomalies
injected into them (the group counterpart of chk_gen).

One producer appends to every partition (every value acknowledged). Members of
group "g" subscribe, poll and commit their positions; rebalances move
partitions between them under the eager protocol (every member gives up
everything, then gets its new share) or the cooperative one (only the changes).
A rebalance happens during a member's poll: the poll may read the partitions it
held before the change, then those it holds after; the event is written right
after the poll, as the contract says. A partition a member gains starts at the
group's committed offset (0 without one); one it keeps goes on from its
position. Commits are sync and ok, or sometimes info (asked for the positions
by name; they took effect at once, later, or not). The offset sampler reads
the group's committed offsets now and then (a commit may complete while a
read is outstanding: the read sees the offsets before it or after), and once
more after the final drain, which reads everything. So a correct history has
no group anomaly, no poll-skip and no nonmonotonic-poll.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Op = dict[str, Any]
MS = 1_000_000
G = "g"
GROUP_TYPES = ("commit-backwards", "lost-consumption", "redelivery", "phantom-commit")
SAMPLER = "offset-sampler"


@dataclass(frozen=True)
class GParams:
    seed: int
    partitions: int
    members: int
    steps: int
    cooperative: bool
    p_info_commit: float


@st.composite
def gparams(draw: Any) -> GParams:
    return GParams(seed=draw(st.integers(0, 2**32 - 1)), partitions=draw(st.integers(1, 3)),
                   members=draw(st.integers(1, 3)), steps=draw(st.integers(5, 80)),
                   cooperative=draw(st.booleans()), p_info_commit=draw(st.sampled_from([0.0, 0.2])))


@dataclass
class Assignment:
    """A partition gained by a member: where it started and the ok-committed offset then."""
    process: int
    partition: int
    start: int
    ok_committed: int
    first_index: int | None = None     # the completion of the poll with its first read


class GroupSim:
    def __init__(self, p: GParams):
        self.p, self.rng = p, random.Random(p.seed)
        self.ops: list[Op] = []
        self.t = 0
        self.logs: dict[int, list[int]] = {q: [] for q in range(p.partitions)}
        self.committed: dict[int, int] = {}           # the group's committed offset per partition
        self.ok_committed: dict[int, int] = {}        # the highest committed by an ok commit
        self.members = list(range(1, 1 + p.members))
        self.held: dict[int, set[int]] = {m: set() for m in self.members}
        self.pos: dict[int, dict[int, int]] = {m: {} for m in self.members}
        self.joined: set[int] = set()
        self.gen = 0
        self.assignments: list[Assignment] = []
        self.open: dict[tuple[int, int], Assignment] = {}
        self.late: list[dict[int, int]] = []          # info commits that take effect later

    def emit(self, process: Any, type: str, f: str, value: Any, **kw: Any) -> Op:
        self.t += self.rng.randint(1, 3) * MS
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f, "value": value, **kw}
        self.ops.append(op)
        return op

    def send(self) -> None:
        q = self.rng.randrange(self.p.partitions)
        v = len(self.logs[q]) + 1
        self.emit(0, "invoke", "send", [[q, v, None]])
        self.logs[q].append(v)
        self.emit(0, "ok", "send", [[q, v, len(self.logs[q]) - 1]])

    def read(self, m: int, value: dict[str, list], parts: set[int]) -> None:
        for q in sorted(parts):
            start = self.pos[m][q]
            end = min(len(self.logs[q]), start + self.rng.randint(0, 3))
            value.setdefault(str(q), []).extend([[o, self.logs[q][o]] for o in range(start, end)])
            self.pos[m][q] = end
            a = self.open.get((m, q))
            if a is not None and a.first_index is None and end > start:
                a.first_index = len(self.ops)       # the poll's completion, emitted next

    def poll(self, m: int, change: dict[str, set[int]] | None = None) -> None:
        self.emit(m, "invoke", "poll", None, group=G)
        value: dict[str, list] = {}
        if change is not None and self.rng.random() < 0.5:
            self.read(m, value, self.held[m])           # before the callback
        if change is not None:
            for q in change["revoked"]:
                self.held[m].discard(q)
                self.open.pop((m, q), None)
                self.pos[m].pop(q, None)
            for q in change["assigned"]:
                self.held[m].add(q)
                self.pos[m][q] = self.committed.get(q, 0)
                self.open[(m, q)] = Assignment(m, q, self.pos[m][q], self.ok_committed.get(q, 0))
                self.assignments.append(self.open[(m, q)])
        self.read(m, value, self.held[m])
        self.emit(m, "ok", "poll", value, group=G)
        if change is not None:
            self.emit(m, "ok", "rebalance", {"assigned": sorted(change["assigned"]),
                                             "revoked": sorted(change["revoked"]), "generation": self.gen,
                                             "member": f"m{m}"}, group=G)

    def commit(self, m: int) -> None:
        offs = {str(q): self.pos[m][q] for q in sorted(self.held[m])}
        if not offs:
            return
        info = self.rng.random() < self.p.p_info_commit
        self.emit(m, "invoke", "commit", offs if info else None, group=G)
        if info:
            r = self.rng.random()
            if r < 0.4:
                self.committed.update({int(q): o for q, o in offs.items()})
            elif r < 0.7:
                self.late.append({int(q): o for q, o in offs.items()})
            self.emit(m, "info", "commit", None, group=G, error="timed out")
            return
        self.committed.update({int(q): o for q, o in offs.items()})
        self.ok_committed.update({int(q): o for q, o in offs.items()})
        self.emit(m, "ok", "commit", offs, group=G)

    def sample(self, final: bool = False) -> None:
        """A read of the committed offsets; a member's commit may complete while it is outstanding."""
        extra = {"final": True} if final else {}
        self.emit(SAMPLER, "invoke", "offsets", {"group": G}, group=G, **extra)
        seen = dict(self.committed)
        if self.late and self.rng.random() < 0.5:
            self.committed.update(self.late.pop(0))
        if not final and self.joined and self.rng.random() < 0.3:
            self.commit(self.rng.choice(sorted(self.joined)))
            if self.rng.random() < 0.5:
                seen = dict(self.committed)
        self.emit(SAMPLER, "ok", "offsets", {str(q): seen.get(q) for q in range(self.p.partitions)}, group=G,
                  **extra)

    def rebalance(self) -> None:
        """A new generation: the joined members share the partitions at random;
        each member's change comes with one of its polls."""
        self.gen += 1
        members = sorted(self.joined)
        share: dict[int, set[int]] = {m: set() for m in members}
        for q in range(self.p.partitions):
            share[self.rng.choice(members)].add(q)
        if self.p.cooperative:
            # revocations first (a partition moves only once its old owner gave it up)
            for m in members:
                if self.held[m] - share[m]:
                    self.poll(m, {"assigned": set(), "revoked": self.held[m] - share[m]})
            for m in members:
                if share[m] - self.held[m]:
                    self.poll(m, {"assigned": share[m] - self.held[m], "revoked": set()})
        else:
            for m in members:
                self.poll(m, {"assigned": set(), "revoked": set(self.held[m])})
            for m in members:
                self.poll(m, {"assigned": share[m], "revoked": set()})

    def run(self) -> list[Op]:
        for _ in range(self.p.steps):
            r = self.rng.random()
            waiting = [m for m in self.members if m not in self.joined]
            if r < 0.3:
                self.send()
            elif waiting and r < 0.4:
                m = self.rng.choice(waiting)
                self.emit(m, "invoke", "subscribe", "topic", group=G)
                self.emit(m, "ok", "subscribe", "topic", group=G)
                self.joined.add(m)
                self.rebalance()
            elif self.joined and r < 0.45:
                self.rebalance()
            elif self.joined and r < 0.6:
                self.commit(self.rng.choice(sorted(self.joined)))
            elif r < 0.68:
                self.sample()
            elif self.joined:
                self.poll(self.rng.choice(sorted(self.joined)))
        d = 100
        for q in range(self.p.partitions):
            self.emit(d + q, "invoke", "assign", [q])
            self.emit(d + q, "ok", "assign", [q])
            self.emit(d + q, "invoke", "poll", None, drain=True)
            self.emit(d + q, "ok", "poll", {str(q): [[o, v] for o, v in enumerate(self.logs[q])]}, drain=True)
        self.sample(final=True)
        return self.ops


def simulate(p: GParams) -> tuple[list[Op], GroupSim]:
    sim = GroupSim(p)
    return sim.run(), sim


# ---------------------------------------------------------------- injection

def _renumber(ops: list[Op]) -> list[Op]:
    for i, o in enumerate(ops):
        o["index"] = i
    return ops


def _drain_start(ops: list[Op]) -> int:
    return next(i for i, o in enumerate(ops) if o["f"] == "assign" and o["process"] >= 100)


def inject(ops: list[Op], sim: GroupSim, typ: str, rng: random.Random) -> tuple[list[Op], int] | None:
    """A copy of ops with one anomaly of ``typ`` and its partition; None when there is no place for one."""
    ops = copy.deepcopy(ops)
    if typ == "commit-backwards":
        # An info commit that asked for the lower offset (or the positions) would explain it
        # (checkers/groups.check_commit_backwards): only where none did.
        invokes: dict[int, Op] = {}
        asked: list[dict[str, int] | None] = []
        for o in ops:
            if o["f"] == "commit" and o["type"] == "invoke":
                invokes[o["process"]] = o
            elif o["f"] == "commit" and o["type"] == "info" and o.get("group") == G:
                asked.append(invokes[o["process"]].get("value"))
        if any(a is None for a in asked):
            return None
        cands = [q for q, c in sim.ok_committed.items()
                 if c >= 1 and all(a.get(str(q), c) > c - 1 for a in asked)]
        if not cands:
            return None
        q = rng.choice(cands)
        m = 1
        at = _drain_start(ops)
        t = ops[at - 1]["time"]
        ops[at:at] = [{"index": 0, "time": t + 1, "process": m, "type": "invoke", "f": "commit",
                       "value": {str(q): sim.ok_committed[q] - 1}, "group": G},
                      {"index": 0, "time": t + 2, "process": m, "type": "ok", "f": "commit",
                       "value": {str(q): sim.ok_committed[q] - 1}, "group": G}]
        return _renumber(ops), q
    polls = [o for o in ops if o["f"] == "poll" and o["type"] == "ok" and o.get("group") == G]
    if typ == "lost-consumption":
        cands = []
        for q, c in sim.ok_committed.items():
            got = sorted({r[0] for o in polls for r in o["value"].get(str(q), [])})
            cands += [(q, off) for off in got[1:] if off < c]
        if not cands:
            return None
        q, off = rng.choice(cands)
        for o in polls:
            if str(q) in o["value"]:
                o["value"][str(q)] = [r for r in o["value"][str(q)] if r[0] != off]
        return ops, q
    if typ == "redelivery":
        # a partition gained where the group had an ok commit: its first read goes one below
        # (an info commit asking for an offset at or below the read may explain it: not there)
        asked = [(int(q), off) for o in ops if o["f"] == "commit" and o["type"] == "invoke" and o["value"]
                 for q, off in o["value"].items()]
        cands = [a for a in sim.assignments if a.ok_committed >= 1 and a.start == a.ok_committed
                 and a.first_index is not None and not any(q == a.partition and off < a.start for q, off in asked)]
        if not cands:
            return None
        a = rng.choice(cands)
        first = ops[a.first_index]
        below = a.start - 1
        first["value"][str(a.partition)].insert(0, [below, sim.logs[a.partition][below]])
        return ops, a.partition
    if typ == "phantom-commit":
        # a read (not the first) shows an offset for a partition no commit ever asked for
        samples = [o for o in ops if o["f"] == "offsets" and o["type"] == "ok"]
        if len(samples) < 2:
            return None
        o = rng.choice(samples[1:])
        q = rng.choice(sorted(o["value"]))
        o["value"][q] = 10_000 + rng.randrange(100)
        return ops, int(q)
    raise ValueError(typ)
