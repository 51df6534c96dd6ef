"""Elections and what they removed: the step both engines share.

An engine finds the lost writes and inconsistent offsets; this step decides
the elections (from the controller's metadata log when the run stored it,
else from the sampler's view), attributes each loss to the unclean election
that removed it, and says on which replicas each lost write still is. Plain
Python: elections are few, and so are losses next to the ops.

Definitions (docs/design.md, "What the checkers decide"):

* unclean election: a new leader outside its partition's previous ISR and
  eligible leader replicas (ELR). From samples (no ELR, gaps): a new leader
  not in the ISR of the partition's previous sample.
* ELR election: a new leader from the previous ELR only: clean by design
  (KIP-966), reported for information.
* attribution: a lost write at offset o acknowledged at time t was removed by
  the first unclean election of its partition after t whose leader's log
  ended at or before o (the start offset of its leader epoch, from the
  replicas' epoch checkpoints). When an election's start offset is unknown
  the record cannot tell: the write is unattributed. From samples there are
  no epochs: the first unclean election after t, said to be by time only.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from history.ops import PartitionSample
from .kafka_record import FROM_ELR, REMOVING_KINDS, UNCLEAN, RunRecords, elections as record_elections, presence

if TYPE_CHECKING:
    from .common import RunFindings

METADATA, SAMPLES = "metadata-log", "samples"


@dataclass(frozen=True)
class Sample:
    """One sampler op: its id (invoke index), completion index and time."""

    id: int
    index: int | None
    time: int | None
    partitions: list[PartitionSample]


def unclean_elections(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """A partition's new (non-null) leader that differs from its last known
    leader and is not in the ISR of the partition's previous sample (an
    empty ISR says nothing). In sample order; ``ids`` are the two samples'."""
    state: dict[int, tuple[int | None, list[int] | None, int | None]] = {}
    out = []
    for s in sorted(samples, key=lambda s: s.id):
        for p, leader, isr, epoch in s.partitions:
            last_leader, prev_isr, prev_id = state.get(p, (None, None, None))
            if (leader is not None and last_leader is not None and leader != last_leader
                    and prev_isr and leader not in prev_isr):
                out.append({"partition": p, "time": s.time, "index": s.index,
                            "from_leader": last_leader, "to_leader": leader, "epoch": epoch,
                            "last_isr": list(prev_isr), "ids": [prev_id, s.id]})
            state[p] = (leader if leader is not None else last_leader, isr, s.id)
    return out


def samples_of(control_rows: list[dict[str, Any]]) -> list[Sample]:
    return [Sample(r["invoke_index"], r["index"], r["time"],
                   [(s["partition"], s["leader"], list(s["isr"] or []), s["epoch"]) for s in r["sample"]])
            for r in control_rows if r["role"] == "sampler" and r.get("sample") is not None]


def from_records(records: RunRecords) -> list[dict[str, Any]]:
    """Every election in the metadata log, in the results' election shape."""
    out = []
    for c in record_elections(records.changes or []):
        out.append({"partition": c["partition"], "time": c["time"], "index": None, "offset": c["offset"],
                    "kind": c["kind"], "from_leader": c["previous_leader"], "to_leader": c["leader"],
                    "epoch": c["leader_epoch"], "last_isr": c["previous_isr"], "last_elr": c["previous_elr"],
                    "isr": c["isr"], "elr": c["elr"], "recovering": c["recovering"], "ids": []})
    return out


def attribute(unclean: list[dict[str, Any]], offset: int | None, t: int | None,
              epoch_starts: dict[int, int] | None) -> tuple[dict[str, Any] | None, str]:
    """(the election that removed a write, or None; why). ``unclean`` holds
    one partition's elections that can remove writes (unclean, and from the
    metadata log last-leader too); ``epoch_starts`` is None for sampled
    elections (attribution by time only)."""
    if t is None:
        return None, "no ack time"
    later = sorted((e for e in unclean if e["time"] is not None and e["time"] > t),
                   key=lambda e: (e["time"], e.get("epoch") or 0))
    if epoch_starts is None:
        return (later[0], "time") if later else (None, "no unclean election after the ack")
    if offset is None:
        return None, "no acknowledged offset"
    for e in later:
        start = epoch_starts.get(e["epoch"])
        if start is None:
            return None, f"start offset of leader epoch {e['epoch']} unknown"
        if start <= offset:
            return e, "epoch"
    return None, "no unclean or last-leader election after the ack removed its offset"


def judge(rf: "RunFindings", records: RunRecords | None, k: int) -> None:
    """Fill in ``rf``'s election findings, the elections list and each
    lost-write witness's attribution and replica presence."""
    from .common import Finding, Witness
    records = records or RunRecords()
    if records.has_metadata:
        found, source = from_records(records), METADATA
        rf.partition_changes = records.changes or []
    else:
        found = [{**e, "kind": UNCLEAN, "offset": None, "last_elr": None, "isr": None, "elr": None,
                  "recovering": None} for e in unclean_elections(samples_of(rf.control_rows))]
        source = SAMPLES
    unclean = [e for e in found if e["kind"] == UNCLEAN]
    by_p: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in (e for e in found if e["kind"] in REMOVING_KINDS):
        e["lost_writes"] = e["inconsistent_offsets"] = 0
        by_p[e["partition"]].append(e)
    starts = {p: records.epoch_starts(p) for p in by_p} if source == METADATA else {}
    where: dict[tuple[int, int], dict[str, Any]] = {}
    unattributed = 0
    for p, offset, value, t in rf.losses:
        e, why = attribute(by_p.get(p, []), offset, t, starts.get(p) if source == METADATA else None)
        if e is not None:
            e["lost_writes"] += 1
        else:
            unattributed += 1
        where[(p, value)] = {"election": None if e is None else {x: e[x] for x in ("partition", "kind", "epoch",
                                                                                   "to_leader", "time", "offset",
                                                                                   "index")},
                             "basis": why, "replicas": presence(records, p, value) if records.replicas else None}
    for p, offset, t in rf.inconsistent:
        e, _ = attribute(by_p.get(p, []), offset, t, starts.get(p) if source == METADATA else None)
        if e is not None:
            e["inconsistent_offsets"] += 1
    for lost in (rf.anomalies.get(t) for t in ("lost-write", "lost-txn-write")):   # txn.py: committed txns' writes
        if lost is None:
            continue
        for w in lost.witnesses:
            info = where.get((w.partition, w.values[0])) if w.values else None
            if info is not None:
                w.extra = {**w.extra, "attributed_to": info["election"], "attribution": info["basis"],
                           "replicas": info["replicas"]}
    summary = {"absent_everywhere": 0, "present_somewhere": 0, "not_read": 0}
    for info in where.values():
        reps = info["replicas"] or {}
        if any(isinstance(v, int) for v in reps.values()):
            summary["present_somewhere"] += 1
        elif reps and all(v == "absent" for v in reps.values()):
            summary["absent_everywhere"] += 1
        else:
            summary["not_read"] += 1
    rf.stats["lost_writes_on_replicas"] = summary
    rf.stats["unattributed_lost_writes"] = unattributed

    def finding(kind: str, keys: tuple[str, ...]) -> Finding:
        items = sorted((e for e in found if e["kind"] == kind),
                       key=lambda e: (e["partition"], e["time"] if e["time"] is not None else -1))
        return Finding(count=len(items), witnesses=[
            Witness(e["partition"], [], [], list(e["ids"]), extra={x: e.get(x) for x in keys}) for e in items[:k]])
    keys = ("kind", "time", "from_leader", "to_leader", "epoch", "last_isr", "last_elr", "isr", "elr",
            "recovering", "offset", "lost_writes", "inconsistent_offsets")
    rf.anomalies["unclean-election"] = finding(UNCLEAN, keys)
    rf.anomalies["elr-election"] = finding(FROM_ELR, keys)
    for e in found:
        e.pop("ids", None)
    rf.elections = sorted(unclean, key=lambda e: (e["partition"], e["time"] if e["time"] is not None else -1))
    rf.election_source = {"source": source, "notes": list(records.notes),
                          "elections": sorted(found, key=lambda e: (e["partition"], e["offset"] or 0,
                                                                    e["time"] or 0))}
