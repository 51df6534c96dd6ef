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

import logging
from collections import Counter, defaultdict
from typing import Any, Callable

from history.ops import POLL, REBALANCE, SEND, TXN
from history.paired import PairedOp

from . import txn as txn_checks
from .common import Finding, RunFindings, Settings, Witness, availability
from .committed_offsets import OFFSET_TYPES, check_phantom_commits
from .hanging import drain_view
from .groups import chain_cuts, check_groups, rebalances
from .share import SHARE_TYPES, check_share
from .reference_stats import ack_times, stats
from .run_index import Msg, RunIndex
from .settle import MarkerOf
from .txn import read_committed

log = logging.getLogger(__name__)



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
