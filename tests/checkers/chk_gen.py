"""Histories of a correct Kafka, simulated (their anomalies injected by
chk_gen_inject.py).

The simulation keeps one log per partition. A send takes effect at its
completion (inside its invoke-completion interval, so offsets are linearizable);
info sends take effect or not at random; fail sends never do. With ``mixed``,
an info send of several messages may have mixed outcomes (``outcomes``): its
acknowledged messages carry offsets (acks, as for ok sends), its "info" ones
may or may not have landed, its "fail" ones did not. Assign-mode consumers
read contiguously from their position, and a partition they did not hold
before starts at its log start, so every offset from the log start up to a
read offset was read by someone (no lost writes in a correct history).
Subscribe-mode consumers may be rewound (rebalances), which is allowed. An
assign that keeps a partition continues its position there (the chain goes
on); a partition it adds starts at the log start. A poll
that ends in info crashes its process: a new process number takes over, as
the runner does. The final drain (optional) reads every partition from its log
start to its end, one process per partition as ``workloads/drain.py`` does;
with ``drain_info`` it stops short and its last op is ``info``.

``pipelined``: besides the clients, one or two pipelined producers
(``workloads/pipelined.py``), each with two or three slot processes whose
sends are one message each and name the producer (``"producer": "pN"``).
Several of a producer's sends are outstanding at once; its messages enter the
log in send (invoke) order, as an idempotent producer's do: a send that will
be acknowledged is appended at its invoke, an info one maybe, a failed one
never. An info send retires its slot's process (a new number takes over).

``retention``: each partition starts with a few values a warm-up writer
outside the history wrote (never acknowledged in it), and retention events move
the log start past a prefix that holds no acknowledged value and that every
consumer holding the partition has read past (so reads start above 0, and
nothing acknowledged is deleted).

``meta``: the run also has Kafka's own record (``SimRun.metadata``,
``SimRun.replicas``): the controller's metadata log of the topic (a
``PartitionRecord`` per partition, then ``PartitionChangeRecord``s for ISR
shrinks and expansions and for clean elections from the ISR) and each
replica's log with its leader epoch checkpoint. With ``elr`` it also has
KIP-966 cycles: the ISR shrinks to the leader (the others become eligible
leader replicas), the leader is fenced (ISR empty, leader -1), a member of the
ELR is elected, the ISR expands again; all at one step, as acks=all writes are
refused while the ISR is below min.insync.replicas. Samples then report the
record's leader, ISR and epoch. Every replica holds the one log (nothing
acknowledged is ever truncated in a correct run).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from checkers.kafka_record import Replica, RunRecords, fold_changes
from chk_gen_params import Params, params, random_params  # noqa: F401 - the simulation's parameters, imported from here

Op = dict[str, Any]
MS = 1_000_000
FRESH = 1_000_000_000   # values no simulated send ever writes
WARMUP = 2_000_000_000  # values of the warm-up writer (retention)
W0 = 1_700_000_000_000 * MS   # wall clock (ns) at history time 0
BROKERS = [1, 2, 3]
MIN_ISR = 2
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
DRAIN_BASE = 10_000     # drain process of partition q: DRAIN_BASE + q


@dataclass
class SimRun:
    """A simulated run: its history and, with ``meta``, Kafka's record of it."""

    ops: list[Op]
    metadata: list[dict[str, Any]] | None = None     # metadata.jsonl rows (no header)
    replicas: list[dict[str, Any]] = field(default_factory=list)   # replicas.jsonl rows
    wall_ns_at_zero: int = W0
    elr_elections: int = 0
    clean_elections: int = 0

    def records(self) -> RunRecords | None:
        """What ``load_records`` would build from this run's files (None: no record)."""
        if self.metadata is None:
            return None
        reps: dict[int, list[Replica]] = {}
        for r in self.replicas:
            by_value = None
            if r["records"] is not None:
                by_value = {}
                for off, val, _ in r["records"]:
                    if val not in by_value or off < by_value[val]:
                        by_value[val] = off
            reps.setdefault(r["partition"], []).append(Replica(
                node=r["node"], partition=r["partition"], log_start_offset=r["log_start_offset"],
                log_end_offset=r["log_end_offset"], epochs=[(e, s) for e, s in r["epochs"]],
                by_value=by_value, note=r.get("note")))
        return RunRecords(changes=fold_changes(self.metadata, self.wall_ns_at_zero), replicas=reps)

    def write(self, run_dir: Any) -> None:
        """history.jsonl (with its header), metadata.jsonl and replicas.jsonl in ``run_dir``."""
        import json
        from pathlib import Path
        from history.ops import header
        d = Path(run_dir)
        d.mkdir(parents=True, exist_ok=True)
        lines = [header(self.wall_ns_at_zero)] + self.ops
        (d / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
        if self.metadata is not None:
            head = {"kchaos-metadata": 1, "topic": "kchaos", "topic_id": TOPIC_ID, "source": "n1", "errors": {}}
            (d / "metadata.jsonl").write_text("".join(json.dumps(o) + "\n" for o in [head] + self.metadata),
                                              encoding="utf-8")
            head = {"kchaos-replicas": 1, "topic": "kchaos"}
            (d / "replicas.jsonl").write_text("".join(json.dumps(o) + "\n" for o in [head] + self.replicas),
                                              encoding="utf-8")


def assign_epoch(cache: list[tuple[int, int]], epoch: int, start: int) -> list[tuple[int, int]]:
    """Kafka's LeaderEpochFileCache.assign: entries with an epoch >= the new one
    or a start offset >= the new one are dropped (non-monotonic)."""
    return [(e, s) for e, s in cache if e < epoch and s < start] + [(epoch, start)]


def truncate_cache_from_start(cache: list[tuple[int, int]], log_start: int) -> list[tuple[int, int]]:
    """Kafka's truncateFromStart: entries below the log start collapse into the
    last of them, moved up to the log start."""
    below = [(e, s) for e, s in cache if s <= log_start]
    rest = [(e, s) for e, s in cache if s > log_start]
    return ([(below[-1][0], log_start)] if below else []) + rest


class Sim:
    def __init__(self, p: Params):
        self.p = p
        self.rng = random.Random(p.seed)
        self.ops: list[Op] = []
        self.t = 0
        self.logs: dict[int, list[int]] = {q: [] for q in range(p.partitions)}
        self.log_epoch: dict[int, list[int]] = {q: [] for q in range(p.partitions)}
        self.log_start = {q: 0 for q in range(p.partitions)}
        self.acked: dict[int, set[int]] = {q: set() for q in range(p.partitions)}
        self.counter = {q: 0 for q in range(p.partitions)}
        self.next_proc = p.clients
        self.procs = list(range(p.clients))
        self.pending: dict[int, Op] = {}
        self.assigned: dict[int, list[int]] = {}
        self.pos: dict[int, dict[int, int]] = {}
        self.brokers = list(BROKERS)
        self.leader = {q: 1 + q % 3 for q in range(p.partitions)}
        self.open_fault: int | None = None
        self.fault_id = 0
        # Kafka's record (meta)
        self.meta: list[dict[str, Any]] | None = [] if p.meta else None
        self.epoch = {q: 0 for q in range(p.partitions)}
        self.isr = {q: list(BROKERS) for q in range(p.partitions)}
        self.elr: dict[int, list[int]] = {q: [] for q in range(p.partitions)}
        self.cache = {q: [(0, 0)] for q in range(p.partitions)}
        self.elr_elections = self.clean_elections = 0
        # pipelined producers: slot process -> producer; a pending slot send's fate
        self.slot_of: dict[int, str] = {}
        self.slot_fate: dict[int, tuple[str, int | None]] = {}
        if p.pipelined:
            for k in range(1 + self.rng.randrange(2)):
                for _ in range(2 + self.rng.randrange(2)):
                    self.slot_of[self.next_proc] = f"p{k}"
                    self.procs.append(self.next_proc)
                    self.next_proc += 1
        if self.meta is not None:
            for q in range(p.partitions):
                self.record("PartitionRecord", {
                    "partitionId": q, "topicId": TOPIC_ID, "replicas": list(BROKERS), "isr": list(BROKERS),
                    "removingReplicas": [], "addingReplicas": [], "leader": self.leader[q],
                    "leaderRecoveryState": 0, "leaderEpoch": 0, "partitionEpoch": 0,
                    "eligibleLeaderReplicas": [], "lastKnownElr": []})
        if p.retention:
            for q in range(p.partitions):
                for i in range(self.rng.randint(1, 5)):
                    self.append(q, WARMUP + i)

    # -- Kafka's state ----------------------------------------------------------------
    def record(self, typ: str, data: dict[str, Any], dt: int = 0) -> None:
        assert self.meta is not None
        self.meta.append({"offset": 100 + 3 * len(self.meta), "wall_ms": (W0 + self.t + dt) // MS,
                          "type": typ, "data": data})

    def change(self, q: int, dt: int = 0, **fields: Any) -> None:
        self.record("PartitionChangeRecord", {"partitionId": q, "topicId": TOPIC_ID, "leader": -2, **fields}, dt)

    def append(self, q: int, value: int) -> int:
        self.logs[q].append(value)
        self.log_epoch[q].append(self.epoch[q])
        return len(self.logs[q]) - 1

    def elect(self, q: int, leader: int) -> None:
        self.leader[q] = leader
        self.epoch[q] += 1
        self.cache[q] = assign_epoch(self.cache[q], self.epoch[q], len(self.logs[q]))

    def metadata_event(self) -> None:
        q = self.rng.randrange(self.p.partitions)
        isr, leader = self.isr[q], self.leader[q]
        choices = []
        if len(isr) > MIN_ISR:
            choices.append("shrink")
        if len(isr) < len(BROKERS):
            choices.append("expand")
        if len(isr) > 1:
            choices.append("elect")
        if self.p.elr and len(isr) >= MIN_ISR:
            choices.append("elr")
        what = self.rng.choice(choices)
        if what == "shrink":
            victim = self.rng.choice([b for b in isr if b != leader])
            self.isr[q] = [b for b in isr if b != victim]
            self.change(q, isr=self.isr[q])
        elif what == "expand":
            self.isr[q] = sorted(set(isr) | {self.rng.choice([b for b in BROKERS if b not in isr])})
            self.change(q, isr=self.isr[q])
        elif what == "elect":
            new = self.rng.choice([b for b in isr if b != leader])
            self.elect(q, new)
            self.clean_elections += 1
            self.change(q, leader=new)
        else:
            # KIP-966: shrink below min ISR (the others become eligible), fence the
            # leader, elect from the ELR, expand; at one step (writes are refused).
            others = sorted(b for b in isr if b != leader)
            self.change(q, isr=[leader], eligibleLeaderReplicas=others)
            self.epoch[q] += 1          # leader -1 bumps the epoch too (PartitionRegistration.merge)
            self.change(q, dt=MS // 4, leader=-1, isr=[], eligibleLeaderReplicas=sorted(others + [leader]))
            new = self.rng.choice(others)
            self.elect(q, new)
            self.elr_elections += 1
            self.change(q, dt=MS // 2, leader=new, isr=[new],
                        eligibleLeaderReplicas=sorted(b for b in others + [leader] if b != new))
            self.isr[q] = list(BROKERS)
            self.elr[q] = []
            self.change(q, dt=3 * MS // 4, isr=list(BROKERS), eligibleLeaderReplicas=[], lastKnownElr=[])

    def retention_event(self) -> None:
        for q in range(self.p.partitions):
            above = [o for o in self.acked[q] if o >= self.log_start[q]]
            holders = [self.pos[proc][q] for proc, parts in self.assigned.items() if q in parts]
            limit = min([len(self.logs[q])] + above + holders)
            if limit > self.log_start[q]:
                self.log_start[q] = self.rng.randint(self.log_start[q], limit)
                self.cache[q] = truncate_cache_from_start(self.cache[q], self.log_start[q])

    def emit(self, process: Any, type: str, f: str, value: Any, **kw: Any) -> Op:
        self.t += self.rng.randint(1, 5) * MS
        op = {"index": len(self.ops), "time": self.t, "process": process, "type": type, "f": f,
              "value": value, **kw}
        self.ops.append(op)
        return op

    def invoke(self, proc: int) -> None:
        if proc in self.slot_of:
            self.invoke_pipelined(proc)
            return
        r = self.rng.random()
        if proc not in self.assigned or r < 0.08:
            parts = sorted(self.rng.sample(range(self.p.partitions), self.rng.randint(1, self.p.partitions)))
            f = "subscribe" if self.p.mode == "subscribe" else "assign"
            self.pending[proc] = self.emit(proc, "invoke", f, parts if f == "assign" else "topic")
            self.pending[proc]["_parts"] = parts
        elif r < 0.55:
            msgs = []
            for _ in range(self.rng.randint(1, 3 if self.p.mixed else 2)):
                q = self.rng.randrange(self.p.partitions)
                self.counter[q] += 1
                msgs.append([q, self.counter[q], None])
            self.pending[proc] = self.emit(proc, "invoke", "send", msgs)
        else:
            self.pending[proc] = self.emit(proc, "invoke", "poll", None)

    def invoke_pipelined(self, proc: int) -> None:
        """One message, which enters the log now (send order) if it will be
        acknowledged, maybe if its outcome will be unknown, never if it fails."""
        q = self.rng.randrange(self.p.partitions)
        self.counter[q] += 1
        r = self.rng.random()
        typ = "fail" if r < self.p.p_fail else "info" if r < self.p.p_fail + self.p.p_info else "ok"
        off = None
        if typ == "ok" or (typ == "info" and self.rng.random() < 0.5):
            off = self.append(q, self.counter[q])
            if typ == "ok":
                self.acked[q].add(off)
        self.slot_fate[proc] = (typ, off if typ == "ok" else None)
        self.pending[proc] = self.emit(proc, "invoke", "send", [[q, self.counter[q], None]],
                                       producer=self.slot_of[proc])

    def complete_pipelined(self, proc: int, inv: Op) -> None:
        typ, off = self.slot_fate.pop(proc)
        q, v, _ = inv["value"][0]
        self.emit(proc, typ, "send", [[q, v, off]], producer=inv["producer"])
        if typ == "info":               # the message may land later: the slot's process retires
            self.procs.remove(proc)
            self.procs.append(self.next_proc)
            self.slot_of[self.next_proc] = self.slot_of.pop(proc)
            self.next_proc += 1

    def complete(self, proc: int) -> None:
        inv = self.pending.pop(proc)
        if proc in self.slot_of:
            self.complete_pipelined(proc, inv)
            return
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
            kw: dict[str, Any] = {}
            if typ == "info" and self.p.mixed and len(msgs) > 1:
                # mixed outcomes: each message acknowledged, failed or unknown
                outcomes = [self.rng.choice(["ok", "fail", "info"]) for _ in msgs]
                for m, oc in zip(msgs, outcomes):
                    if oc == "ok":
                        m[2] = self.append(m[0], m[1])
                        self.acked[m[0]].add(m[2])
                    elif oc == "info" and self.rng.random() < 0.5:
                        self.append(m[0], m[1])
                kw["outcomes"] = outcomes
            elif typ == "ok" or (typ == "info" and self.rng.random() < 0.5):
                for m in msgs:
                    off = self.append(m[0], m[1])
                    if typ == "ok":
                        m[2] = off
                        self.acked[m[0]].add(off)
            self.emit(proc, typ, "send", msgs, **kw)
        else:
            if typ != "ok":
                self.emit(proc, typ, "poll", None)
                if typ == "info":
                    self.crash(proc)
                return
            value = {}
            for q in self.assigned.get(proc, []):
                start = max(self.pos[proc][q], self.log_start[q])   # out of range: reset to earliest
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
            if self.meta is not None:
                parts[str(q)] = {"leader": self.leader[q], "isr": list(self.isr[q]), "epoch": self.epoch[q]}
                continue
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

    def drain(self) -> None:
        """Per partition, a fresh process reads from the log start to the high
        watermark at drain start, five at a time (workloads/drain.py). With
        drain_info, one partition's drain stops short: its last op is info."""
        short = self.rng.randrange(self.p.partitions) if self.p.drain_info else None
        for q in range(self.p.partitions):
            proc = DRAIN_BASE + q
            high, pos = len(self.logs[q]), self.log_start[q]
            acked = [o for o in self.acked[q] if o < high]
            marks = {"log_start": self.log_start[q], "high": high, "max_acked": max(acked) if acked else None}
            stop = self.rng.randint(0, max(0, -(-(high - pos) // 5) - 1)) if q == short else None
            n = 0
            while True:
                self.emit(proc, "invoke", "poll", None, drain=True)
                if n == stop:
                    self.emit(proc, "info", "poll", None, drain=True, watermarks=marks, end=pos,
                              error=f"drain timed out at offset {pos} before the high watermark {high}")
                    break
                end = min(high, pos + 5)
                self.emit(proc, "ok", "poll", {str(q): [[o, self.logs[q][o]] for o in range(pos, end)]},
                          drain=True, watermarks=marks, end=end)
                pos, n = end, n + 1
                if pos == high:
                    break

    def listing(self) -> list[dict[str, Any]]:
        out = []
        for q in range(self.p.partitions):
            start, end = self.log_start[q], len(self.logs[q])
            for b in BROKERS:
                recs = [[o, self.logs[q][o], self.log_epoch[q][o]] for o in range(start, end)]
                out.append({"node": f"n{b}", "broker": b, "partition": q, "log_start_offset": start,
                            "log_end_offset": end, "epochs": [list(e) for e in self.cache[q]],
                            "records": None if self.rng.random() < 0.05 else recs,
                            "note": None, "error": None})
        return out

    def run(self) -> list[Op]:
        return self.run_all().ops

    def run_all(self) -> SimRun:
        for _ in range(self.p.steps):
            r = self.rng.random()
            if r < 0.05:
                self.sample()
            elif r < 0.08:
                self.nemesis()
            elif r < 0.11 and self.meta is not None:
                self.metadata_event()
            elif r < 0.13 and self.p.retention:
                self.retention_event()
            else:
                proc = self.rng.choice(self.procs)
                (self.complete if proc in self.pending else self.invoke)(proc)
        for proc in list(self.pending):
            if self.rng.random() < 0.9:
                self.complete(proc)       # the rest stay outstanding: incomplete ops
        if self.p.drain:
            self.drain()
        return SimRun(ops=self.ops, metadata=self.meta, replicas=self.listing() if self.meta is not None else [],
                      elr_elections=self.elr_elections, clean_elections=self.clean_elections)


def simulate(p: Params) -> list[Op]:
    return Sim(p).run()


def simulate_run(p: Params) -> SimRun:
    return Sim(p).run_all()
