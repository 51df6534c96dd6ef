"""Reference checkers: the anomaly definitions in plain Python.

Small and direct on purpose: this is the executable specification the Spark
engine is tested against, so every definition reads as one loop. Terms:

* ack: a message of a client send with a known offset (every message of an
  ``ok`` send; the acknowledged ones of a mixed ``info`` send).
* read: a message returned by an ``ok`` client poll (drain polls included).
* observation: an ack or a read, as (partition, offset, value).
* known offsets of a partition: every offset some observation names.
* canonical witness order: per type, the sort key named in its checker; both
  engines report the first ``max_witnesses`` in that order.
"""
from __future__ import annotations

import bisect
import dataclasses
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from history.ops import POLL, REBALANCE, SEND, SUBSCRIBE, TXN
from history.paired import PairedOp

from . import txn as txn_checks
from .common import Finding, RunFindings, Settings, Witness, availability, drain_counts
from .committed_offsets import OFFSET_TYPES, check_phantom_commits
from .hanging import drain_view
from .groups import chain_cuts, check_groups, rebalances
from .share import SHARE_TYPES, check_share
from .reference_stats import ack_times, stats
from .settle import MarkerOf, Settled, effective_type, settle
from .txn import acknowledged, read_committed

log = logging.getLogger(__name__)



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


Result = dict[str, Finding]


def _finding(items: list[tuple[Any, Witness]], settings: Settings) -> Finding:
    items.sort(key=lambda kw: kw[0])
    return Finding(count=len(items), witnesses=[w for _, w in items[: settings.max_witnesses]])


def check_offsets(run: RunIndex, settings: Settings) -> Result:
    """inconsistent-offset, order (partition, offset); duplicate, order (partition, value)."""
    by_offset: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    by_value: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    for (p, o, v), first in run.pov.items():
        by_offset[(p, o)][v] = first
        by_value[(p, v)][o] = first
    inc = [((p, o), Witness(p, [o], sorted(vs), [vs[v] for v in sorted(vs)]))
           for (p, o), vs in by_offset.items() if len(vs) > 1]
    dup = [((p, v), Witness(p, sorted(os_), [v], [os_[o] for o in sorted(os_)]))
           for (p, v), os_ in by_value.items() if len(os_) > 1]
    return {"inconsistent-offset": _finding(inc, settings), "duplicate": _finding(dup, settings)}


def check_nonlinearizable(run: RunIndex, settings: Settings) -> Result:
    """An ack B is violated iff some ack A at an offset >= offset(B) completed
    strictly before B was invoked. The witness A is the earliest-completing
    such ack: least (completion time, op id, offset, value) over acks at or
    above offset(B) (B itself never qualifies). Order (partition, B op id, B position)."""
    by_p: dict[int, list[Msg]] = defaultdict(list)
    for m in run.acks:
        by_p[m.partition].append(m)
    items = []
    for p, acks in by_p.items():
        desc = sorted(acks, key=lambda m: -m.offset)
        first: dict[int, tuple[int, int, int, int]] = {}     # offset -> min over offsets >= it
        best = None
        i = 0
        while i < len(desc):
            j = i
            while j < len(desc) and desc[j].offset == desc[i].offset:
                cur = (desc[j].op.time, desc[j].op.id, desc[j].offset, desc[j].value)
                best = cur if best is None else min(best, cur)
                j += 1
            first[desc[i].offset] = best
            i = j
        for b in acks:
            ta, ida, oa, va = first[b.offset]
            if ta < b.op.invoke_time:
                items.append(((p, b.op.id, b.pos),
                              Witness(p, [oa, b.offset], [va, b.value], [ida, b.op.id])))
    return {"nonlinearizable-offset": _finding(items, settings)}


def sender(op: PairedOp) -> tuple[str, Any]:
    """Whose sends must keep their order: the producer instance an op names
    (a pipelined producer's sends, on many processes), else the op's process."""
    return ("producer", op.producer) if op.producer is not None else ("process", op.process)


def check_nonmonotonic_send(run: RunIndex, settings: Settings) -> Result:
    """Successive acks of one sender (``sender``) to one partition, in send
    (invoke) order, then position in the op, whose offsets do not increase.
    Order (partition, op id, position)."""
    last: dict[tuple[tuple[str, Any], int], Msg] = {}
    items = []
    for m in run.acks:   # already in (invoke_index, pos) order
        key = (sender(m.op), m.partition)
        prev = last.get(key)
        if prev is not None and m.offset <= prev.offset:
            items.append(((m.partition, m.op.id, m.pos),
                          Witness(m.partition, [prev.offset, m.offset], [prev.value, m.value],
                                  [prev.op.id, m.op.id])))
        last[key] = m
    return {"nonmonotonic-send": _finding(items, settings)}


def check_polls(run: RunIndex, settings: Settings) -> Result:
    """Per consumer process, partition and drain flag (the final drain is its own
    chain), successive reads while the partition stays assigned: a poll's reads
    and a txn's reads, in op and then micro-op order. An ok assign keeps the
    chains of the partitions it names and ends the others; an info assign and an
    ok/info subscribe end every chain of the process. A rebalance ends the chains
    of the partitions it revokes or assigns (groups.py), and the reads of those
    partitions in the op it follows belong to no chain.

    A txn that did not commit (aborted, or unknown and not settled committed)
    moves no chain: Kafka's contract is that the consumer reads again from where
    it stood before that txn's reads (the workload seeks back; KAFKA-17582), so
    the next read is judged against the position before the txn, and its
    witness names the txn (``after_txn``). Successive reads within one txn are
    the int-* checks' (txn.check_internal), not the chains'.

    An offset not above the previous is nonmonotonic-poll; jumping over known
    offsets is poll-skip. Order (partition, op id, position)."""
    last: dict[Any, dict[tuple[bool, int], Msg]] = defaultdict(dict)
    after: dict[Any, dict[tuple[bool, int], int]] = defaultdict(dict)   # chain -> txn it was taken back over
    non, skip = [], []
    cuts = chain_cuts(rebalances(run.ops))
    for op in run.ops:
        if not op.client:
            continue
        chains, rewound = last[op.process], after[op.process]
        ends: set[int] | None = None
        if op.f == REBALANCE:
            ends = set(op.partitions or ()) | set(op.revoked or ())
        if op.f in ("assign", "subscribe") and op.type in ("ok", "info"):
            keep = set(op.partitions or ()) if op.f == "assign" and op.type == "ok" else set()
            ends = {key[1] for key in chains if key[1] not in keep} | {key[1] for key in rewound if key[1] not in keep}
        if ends:
            for table in (chains, rewound):
                for key in [key for key in table if key[1] in ends]:
                    del table[key]
        if op.f == POLL and op.type == "ok":
            reads, moves = op.messages, True
        elif op.f == TXN:
            reads, moves = op.reads or [], op.type == "ok"
        else:
            continue
        cut = cuts.get(op.id, frozenset())
        before: dict[tuple[bool, int], Msg | None] = {}
        for i, (p, o, v) in enumerate(reads):
            key = (op.drain, p)
            undone = rewound.pop(key, None)
            if p in cut:
                chains.pop(key, None)
                before.pop(key, None)
                continue
            prev = chains.get(key)
            if not moves and key not in before:
                before[key] = prev
            chains[key] = Msg(p, o, v, op, i)
            if prev is None or (op.f == TXN and prev.op.id == op.id):
                continue
            ids = [prev.op.id, op.id] + ([undone] if undone is not None else [])
            w = Witness(p, [prev.offset, o], [prev.value, v], ids,
                        extra={} if undone is None else {"after_txn": undone})
            if o <= prev.offset:
                non.append(((p, op.id, i), w))
            else:
                gap, skipped = run.between(p, prev.offset, o, read_committed(op.isolation))
                if gap > 0:
                    w.extra.update({"skipped": skipped, "skipped_count": gap})
                    skip.append(((p, op.id, i), w))
        for key, prev in before.items():     # a txn that did not commit: back to where the chain stood
            if prev is None:
                chains.pop(key, None)
            else:
                chains[key] = prev
            rewound[key] = op.id
    return {"nonmonotonic-poll": _finding(non, settings), "poll-skip": _finding(skip, settings)}


def lost_messages(run: RunIndex) -> tuple[list[Msg], list[Msg]]:
    """(lost, unseen) ok-send messages.

    Where the final drain of the partition completed, it is what survived: an
    acknowledged value missing from it is lost, even if a poll read it before
    it vanished (an unclean election truncates writes clients already saw).
    Elsewhere, Jepsen's rule: lost if no read returned it although some read
    reached its offset, unseen if no read got that far.
    """
    lost, unseen = [], []
    for m in run.ok_msgs:
        if run.drain_complete(m.partition):
            if (m.partition, m.value) not in run.drained:
                lost.append(m)
            continue
        if (m.partition, m.value) in run.first_read:
            continue
        mr = run.max_read.get(m.partition)
        reached = m.offset is not None and mr is not None and mr[0] >= m.offset
        (lost if reached else unseen).append(m)
    return lost, unseen


def check_lost(run: RunIndex, settings: Settings) -> Result:
    """lost-write (sends), lost-txn-write (committed txns' writes) and unseen
    (both). Order (partition, value, op id, position)."""
    lost, unseen = lost_messages(run)
    out = {}
    for typ, msgs in (("lost-write", [m for m in lost if m.op.f == SEND]), ("unseen", unseen),
                      ("lost-txn-write", [m for m in lost if m.op.f == TXN])):
        items = []
        for m in msgs:
            mr = run.max_read.get(m.partition)
            ids = [m.op.id] + ([-mr[1]] if typ == "lost-write" and mr is not None else [])
            items.append(((m.partition, m.value, m.op.id, m.pos),
                          Witness(m.partition, [] if m.offset is None else [m.offset], [m.value], ids,
                                  extra={"max_read_offset": None if mr is None else mr[0],
                                         "drain_complete": run.drain_complete(m.partition)})))
        out[typ] = _finding(items, settings)
    return out


def check_phantom(run: RunIndex, settings: Settings) -> Result:
    """Messages of fail sends whose value was read; the witness names the lowest
    offset it was read at and the first op that read it. Order (partition,
    value, op id, position)."""
    items = []
    for op in run.sends:
        if op.type != "fail":
            continue
        for i, (p, _, v) in enumerate(op.messages):
            fr = run.first_read.get((p, v))
            if fr is not None:
                items.append(((p, v, op.id, i), Witness(p, [fr[1]], [v], [op.id, fr[0]])))
    return {"phantom-write": _finding(items, settings)}


def losses(run: RunIndex) -> list[tuple[int, int | None, int, int | None]]:
    """Every lost write as (partition, offset, value, ack time), for the election step."""
    return [(m.partition, m.offset, m.value, m.op.time) for m in lost_messages(run)[0]]


def inconsistent(run: RunIndex) -> list[tuple[int, int, int | None]]:
    """Every inconsistent offset as (partition, offset, earliest ack time there)."""
    first_ack: dict[tuple[int, int], int] = {}
    for m in run.acks:
        k = (m.partition, m.offset)
        first_ack[k] = min(first_ack.get(k, m.op.time), m.op.time)
    values = Counter((p, o) for p, o, _ in run.pov)
    return [(p, o, first_ack.get((p, o))) for (p, o), n in sorted(values.items()) if n > 1]


CHECKS: dict[str, Callable[[RunIndex, Settings], Result]] = {
    "offsets": check_offsets,
    "nonlinearizable": check_nonlinearizable,
    "send-order": check_nonmonotonic_send,
    "poll-order": check_polls,
    "lost": check_lost,
    "phantom": check_phantom,
    **txn_checks.CHECKS,
    "groups": lambda run, settings: check_groups(run.ops, settings),
    "share": lambda run, settings: _share(run, settings),
    "committed-offsets": lambda run, settings: {"phantom-commit": check_phantom_commits(run.ops, settings)[0]},
}
TYPES_OF = {
    "offsets": ("inconsistent-offset", "duplicate"),
    "nonlinearizable": ("nonlinearizable-offset",),
    "send-order": ("nonmonotonic-send",),
    "poll-order": ("nonmonotonic-poll", "poll-skip"),
    "lost": ("lost-write", "unseen", "lost-txn-write"),
    "phantom": ("phantom-write",),
    **txn_checks.TYPES_OF,
    "groups": ("commit-backwards", "lost-consumption", "redelivery"),
    "share": SHARE_TYPES,
    "committed-offsets": OFFSET_TYPES,
}


def _share(run: RunIndex, settings: Settings) -> Result:
    """Share groups (share.py); their stats join the run's after the checks."""
    found, run.share_stats = check_share(run.ops, settings)
    return found


def analyze(ops: list[PairedOp], settings: Settings, marker: MarkerOf | None = None,
            wanted: set[tuple[int, int]] | None = None) -> RunFindings:
    """Run every check; a check that raises marks its anomaly types with the error.
    ``marker``: Kafka's record of transaction markers (kafka_record.marker_of), for settling info txns;
    ``wanted``: (partition, value)s whose writing op hanging.judge names (hanging.wanted)."""
    run = RunIndex(ops, marker)
    anomalies: dict[str, Finding] = {}
    errors = []
    for name, fn in CHECKS.items():
        try:
            anomalies.update(fn(run, settings))
        except Exception as e:  # noqa: BLE001 - a crash must give "unknown", never a pass
            msg = f"{name}: {type(e).__name__}: {e}"
            errors.append(msg)
            log.exception("checker %s crashed", name)
            for t in TYPES_OF[name]:
                anomalies[t] = Finding(error=msg)
    try:
        st = stats(run)
    except Exception as e:  # noqa: BLE001
        errors.append(f"stats: {type(e).__name__}: {e}")
        st = {}
    st.update(getattr(run, "share_stats", None) or {})
    if "availability_counts" in st:
        st["availability"] = availability(st.pop("availability_counts"))
    if run.settled:
        st["settled_txns"] = [run.settled[i].as_dict() for i in sorted(run.settled)]
    writers: dict[tuple[int, int], int] = {}
    for o in run.recorded if wanted else ():      # in id order: the first op that wrote a value
        if o.client and o.f in (SEND, TXN):
            for p, _, v in o.messages:
                if (p, v) in wanted:
                    writers.setdefault((p, v), o.id)
    ids = {i for f in anomalies.values() for w in f.witnesses for i in w.op_ids} | set(writers.values())
    lost, inc = [], []
    try:
        lost, inc = losses(run), inconsistent(run)
    except Exception as e:  # noqa: BLE001
        errors.append(f"losses: {type(e).__name__}: {e}")
    return RunFindings(
        anomalies=anomalies, stats=st, elections=[], mode=run.mode, losses=lost, inconsistent=inc,
        has_ok_send=any(o.type == "ok" for o in run.sends) or any(o.type == "ok" and o.messages for o in run.txns),
        errors=errors,
        op_rows={i: run.by_id[i].to_row() for i in ids if i in run.by_id},
        control_rows=[o.to_row() for o in run.ops if not o.client],
        writers=writers, drain_view=drain_view(o.to_row() for o in run.polls if o.drain),
        ack_times=ack_times(run),
    )
