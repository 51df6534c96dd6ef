"""The run index the reference checkers share: one run's paired ops indexed
once (acknowledged and read messages, what the drain read, info transactions
settled from Kafka's markers, the known offsets of each partition), so that
every check in ``checkers.reference`` reads as one loop over them. Terms as
``checkers.reference`` defines them.
"""
from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from history.ops import POLL, REBALANCE, SEND, SUBSCRIBE, TXN
from history.paired import PairedOp

from . import txn as txn_checks
from .common import drain_counts
from .settle import MarkerOf, Settled, effective_type, settle
from .txn import acknowledged, read_committed


@dataclass(frozen=True)
class Msg:
    partition: int
    offset: int | None
    value: int
    op: PairedOp
    pos: int            # position in the op's message list: orders messages within an op


class RunIndex:
    """Indexes over one run's paired ops, shared by the checks."""

    def __init__(self, ops: list[PairedOp], marker: MarkerOf | None = None):
        recorded = sorted(ops, key=lambda o: o.invoke_index)
        self.recorded = recorded                          # as recorded: what witnesses and op counts show
        self.by_id = {o.id: o for o in recorded}
        polls = [o for o in recorded if o.client and o.f == POLL]
        self.reads = [Msg(p, off, v, o, i) for o in polls if o.type == "ok" for i, (p, off, v) in enumerate(o.messages)]
        # a txn's reads happened whatever its outcome
        self.reads += [Msg(p, off, v, o, i) for o in recorded if o.client and o.f == TXN
                       for i, (p, off, v) in enumerate(o.reads or [])]
        drains = [o for o in polls if o.drain]
        self.drained = {(m.partition, m.value) for m in self.reads if m.op.drain}
        self.drain_all_ok = bool(drains) and all(o.type == "ok" for o in drains)
        self.drain_parts = {p for o in drains if o.type == "ok" for p in o.partitions or []}
        self.drain_counts = drain_counts(len(drains), sum(o.type == "ok" for o in drains),
                                         [o.error for o in drains if o.type != "ok"])
        # info txns settled from markers, reads and the drain (settle.py); the checks judge their effective type
        self.settled: dict[int, Settled] = self._settle(recorded, marker)
        effective = {i: dataclasses.replace(self.by_id[i], type=t) for i, s in self.settled.items()
                     if (t := effective_type("info", s)) != "info"}
        if effective:
            self.ops = [effective.get(o.id, o) for o in recorded]
            self.reads = [dataclasses.replace(m, op=effective[m.op.id]) if m.op.id in effective else m
                          for m in self.reads]
        else:
            self.ops = recorded
        self.sends = [o for o in self.ops if o.client and o.f == SEND]
        self.txns = [o for o in self.ops if o.client and o.f == TXN]
        self.ok_msgs = [Msg(p, off, v, o, i) for o in self.ops if o.client and o.f in (SEND, TXN)
                        for i, (p, off, v) in enumerate(o.messages) if acknowledged(o, off)]
        self.acks = [m for m in self.ok_msgs if m.offset is not None]
        self.polls = [o for o in self.ops if o.client and o.f == POLL]
        self.pov: dict[tuple[int, int, int], int] = {}
        for m in self.acks + self.reads:
            key = (m.partition, m.offset, m.value)
            self.pov[key] = min(self.pov.get(key, m.op.id), m.op.id)
        known: dict[int, set[int]] = defaultdict(set)
        for p, o, _ in self.pov:
            known[p].add(o)
        self.known = {p: sorted(s) for p, s in known.items()}
        # what a read_committed consumer sees: not offsets known only from values of txns that did not
        # commit (aborted, or info and not settled committed)
        hidden = {(p, v) for o in self.txns if o.type != "ok" for p, _, v in o.messages}
        known_rc: dict[int, set[int]] = defaultdict(set)
        for p, o, v in self.pov:
            if (p, v) not in hidden:
                known_rc[p].add(o)
        self.known_rc = {p: sorted(s) for p, s in known_rc.items()}
        # (p, v) -> (first reader's op id, lowest offset it was read at)
        self.first_read: dict[tuple[int, int], tuple[int, int]] = {}
        self.max_read: dict[int, tuple[int, int]] = {}                 # p -> (offset, -reader id)
        for m in self.reads:
            k = (m.partition, m.value)
            rid, off = self.first_read.get(k, (m.op.id, m.offset))
            self.first_read[k] = (min(rid, m.op.id), min(off, m.offset))
            self.max_read[m.partition] = max(self.max_read.get(m.partition, (m.offset, -m.op.id)),
                                             (m.offset, -m.op.id))
        # "group": subscribe with rebalances recorded (chains follow them; no subscribe allowance)
        self.mode = ("group" if any(o.client and o.f == REBALANCE for o in self.ops)
                     else "subscribe" if any(o.f == SUBSCRIBE for o in self.ops) else "assign")

    def _settle(self, recorded: list[PairedOp], marker: MarkerOf | None) -> dict[int, Settled]:
        info = [o for o in recorded if o.client and o.f == TXN and o.type == "info"]
        if not info:
            return {}
        writer = {(p, v): o.id for o in info for p, _, v in o.messages}
        readers: dict[tuple[int, int], tuple[int, int]] = {}
        for m in self.reads:
            k = (m.partition, m.value)
            if k in writer and writer[k] != m.op.id and read_committed(m.op.isolation):
                readers[k] = min(readers.get(k, (m.op.id, m.offset)), (m.op.id, m.offset))
        return settle(((o.id, list(o.messages)) for o in info), readers, self.drained, self.drain_complete, marker)

    def rank(self, p: int, offset: int) -> int:
        return bisect.bisect_left(self.known[p], offset)

    def between(self, p: int, lo: int, hi: int, rc: bool) -> tuple[int, list[int]]:
        """Known offsets strictly between lo and hi (``known_rc`` for a read_committed
        reader): how many, and the first few."""
        return txn_checks.between((self.known_rc if rc else self.known).get(p, []), lo, hi)

    def drain_complete(self, p: int) -> bool:
        return self.drain_all_ok and p in self.drain_parts
