"""Settling the transactions whose outcome the client never learned.

An ``info`` txn called ``commit_transaction`` and never heard back: it may have
committed or not. The checks cannot treat it as committed (its writes would be
acknowledged writes that may rightly be absent) nor as aborted (a read of its
value would be an aborted read), so an unsettled one stays unknown: its writes
are no acknowledged writes, and read_committed readers may skip its offsets.
But the run often tells (docs/design.md, "Transactions"), in this order:

1. **Kafka's markers.** Kafka ends a transaction by writing a control record,
   COMMIT or ABORT, into every partition it wrote, after its data and with its
   producer id; the replicas' data files hold them (``kafka_record.txn_outcome``).
   A COMMIT after one of the txn's writes settles it committed, an ABORT
   aborted (the coordinator decides once for all partitions: markers that
   disagree settle nothing and say so).
2. **Reads.** A read_committed read (a client's poll or txn read, or the final
   drain) that returned one of its values, by another op than the txn itself:
   such a consumer returns only committed records, so the txn committed.
3. **The drain.** The final drain (read_committed) read every partition the
   txn wrote to its end and returned none of its values: nothing of it is
   visible, so it did not commit.

Markers come first because they are Kafka's own record: a txn whose ABORT
marker follows its write, yet whose value a read_committed consumer returned,
is settled aborted, and that read is then an aborted read. Pure and standard
library only: both engines call ``settle`` with what they gathered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from .kafka_record import RunRecords, txn_outcome

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
MARKERS, READS, DRAIN = "markers", "reads", "drain"

Write = tuple[int, "int | None", int]                     # (partition, offset, value)
# (partition, value) -> (state, evidence): kafka_record.txn_outcome's answer for one write
MarkerOf = Callable[[int, int], tuple[str, str]]


@dataclass(frozen=True)
class Settled:
    """How one ``info`` txn was settled: ``outcome`` committed, aborted or
    unknown; ``source`` what settled it (markers, reads, drain; None when
    unknown); ``evidence`` one sentence a person can check."""

    op_id: int
    outcome: str
    source: str | None
    evidence: str

    def as_dict(self) -> dict[str, object]:
        return {"op": self.op_id, "outcome": self.outcome, "from": self.source, "evidence": self.evidence}


def _by_markers(writes: list[Write], marker: MarkerOf | None) -> tuple[str | None, str]:
    if marker is None:
        return None, "no replica listing was stored"
    states = [(p, v, *marker(p, v)) for p, _, v in writes]
    commits = [s for s in states if s[2] == "commit"]
    aborts = [s for s in states if s[2] == "abort"]
    if commits and aborts:
        return None, (f"markers disagree: COMMIT after value {commits[0][1]} (partition {commits[0][0]}), "
                      f"ABORT after value {aborts[0][1]} (partition {aborts[0][0]})")
    if commits:
        return COMMITTED, commits[0][3]
    if aborts:
        return ABORTED, aborts[0][3]
    p, v, state, evidence = states[0]
    return None, f"no marker settles it (value {v}, partition {p}: {state}{': ' + evidence if evidence else ''})"


def settle(txns: Iterable[tuple[int, list[Write]]],
           readers: dict[tuple[int, int], tuple[int, int]],
           drained: set[tuple[int, int]],
           drain_complete: Callable[[int], bool],
           marker: MarkerOf | None = None) -> dict[int, Settled]:
    """Each ``info`` txn ``(op id, writes)``, settled.

    ``readers``: (partition, value) -> (op id, offset) of the first
    read_committed read of it by an op other than its writer (the callers
    leave the writer's own reads out); ``drained``: the (partition, value)s
    the final drain returned; ``drain_complete(p)``: the drain read p to its
    end; ``marker``: Kafka's record for one write, or None without one.
    """
    out: dict[int, Settled] = {}
    for op_id, writes in txns:
        if not writes:
            out[op_id] = Settled(op_id, UNKNOWN, None, "it wrote nothing")
            continue
        outcome, why_not_markers = _by_markers(writes, marker)
        if outcome is not None:
            out[op_id] = Settled(op_id, outcome, MARKERS, why_not_markers)
            continue
        read = next(((p, v, *readers[(p, v)]) for p, _, v in writes if (p, v) in readers), None)
        if read is not None:
            p, v, reader, offset = read
            out[op_id] = Settled(op_id, COMMITTED, READS,
                                 f"op {reader} read its value {v} (partition {p}, offset {offset}) read_committed")
            continue
        parts = sorted({p for p, _, _ in writes})
        open_parts = [p for p in parts if not drain_complete(p)]
        if not open_parts and not any((p, v) in drained for p, _, v in writes):
            out[op_id] = Settled(op_id, ABORTED, DRAIN,
                                 f"the final drain read partition(s) {parts} to their end and returned none of "
                                 f"its {len(writes)} write(s)")
            continue
        why = (f"the final drain did not complete partition(s) {open_parts}" if open_parts
               else "no read_committed read returned its values")
        out[op_id] = Settled(op_id, UNKNOWN, None, f"{why}; {why_not_markers}")
    return out


def markers_of(records: RunRecords | None) -> MarkerOf | None:
    """Kafka's record of markers as ``settle`` asks for it, or None when the
    run stored no replica listing."""
    if records is None or not records.replicas:
        return None

    def marker(partition: int, value: int) -> tuple[str, str]:
        s = txn_outcome(records, partition, value)
        return s.state, s.evidence
    return marker


def effective_type(op_type: str, settled: Settled | None) -> str:
    """The type the checks judge a txn by: a settled ``info`` txn as ``ok``
    (committed) or ``fail`` (aborted); everything else as recorded."""
    if settled is None or settled.outcome == UNKNOWN:
        return op_type
    return "ok" if settled.outcome == COMMITTED else "fail"
