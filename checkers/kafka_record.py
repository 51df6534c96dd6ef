"""Kafka's own record of a run: the controller's metadata log and the replicas' logs.

The harness reads both from the nodes before the cluster is removed
(``harness.record_collector``) and stores them beside the history; this module is
their reader and the one interpretation of them (docs/design.md, "Kafka's own
record"). Standard library only.

``metadata.jsonl``: a header ``{"kchaos-metadata": 1, "topic", "topic_id",
"source", "errors", ...}``, then the run topic's metadata records in log order,
``{"offset", "wall_ms", "type", "data"}`` with ``data`` the record as Kafka's
decoder printed it. ``PartitionRecord`` is a partition's whole state;
``PartitionChangeRecord`` a change to it: ``leader`` -2 means unchanged (any
other value bumps the leader epoch, as Kafka's ``PartitionRegistration.merge``
does), -1 no leader; a null ``isr``, ``eligibleLeaderReplicas`` or
``lastKnownElr`` means unchanged; ``leaderRecoveryState`` 1 marks a leader
elected uncleanly that is recovering.

``replicas.jsonl``: a header ``{"kchaos-replicas": 1, "topic", ...}``, then one
line per (node, partition): ``{"node", "broker", "partition",
"log_start_offset", "log_end_offset", "epochs": [[epoch, start_offset], ...],
"records": [[offset, value, epoch, producer_id], ...] | null,
"markers": [[offset, producer_id, producer_epoch, "COMMIT" | "ABORT"], ...] | null,
"txn_batches": [[base_offset, last_offset, producer_id, producer_epoch], ...] | null,
"note", "error"}``; the header's ``read_wall_ms`` says when the reading began.
``epoch`` is the leader epoch of the record's batch, ``producer_id`` its batch's producer; ``markers`` are the end-transaction control
records Kafka writes into every partition a transaction touched, after its data,
with the same producer id (with transactions v2, KIP-890, the marker's producer
epoch can be the data's + 1: match by id); ``txn_batches`` are the transactional data
batches (control batches left out). Runs stored before markers were read have
3-field records and no ``markers``: they load, and ``txn_outcome`` says "not-read";
runs stored before ``txn_batches`` and ``read_wall_ms`` load with them None.
"""
from __future__ import annotations

import json
import logging
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

METADATA_FILE, REPLICAS_FILE = "metadata.jsonl", "replicas.jsonl"
NO_LEADER, NO_LEADER_CHANGE = -1, -2
RECOVERING = 1

# election kinds of a partition change that sets a leader
CREATE, FROM_ISR, FROM_ELR, UNCLEAN, LEADERLESS = "create", "isr", "elr", "unclean", "leaderless"
LAST_LEADER = "last-leader"
# elections after which an acknowledged write may be missing from the new leader's log
REMOVING_KINDS = (UNCLEAN, LAST_LEADER)


@dataclass
class Replica:
    """One replica's log as read from its data files at the end of the run."""

    node: str
    partition: int
    log_start_offset: int | None
    log_end_offset: int | None
    epochs: list[tuple[int, int]]
    by_value: dict[int, int] | None          # value -> lowest offset it is at; None when not read
    note: str | None = None
    # value -> producer id of the batch at its lowest offset; None when not read or stored before producers were
    producers: dict[int, int | None] | None = None
    # end-transaction markers (offset, producer id, producer epoch, "COMMIT" | "ABORT") in offset order;
    # None when not read (over max_records, or stored before markers were)
    markers: list[tuple[int, int, int, str]] | None = None
    # transactional data batches (base offset, last offset, producer id, producer epoch); None when not read
    txn_batches: list[tuple[int, int, int, int]] | None = None

    @property
    def txn_readable(self) -> bool:
        """Whether this listing can settle a transaction: values, producers and markers all read."""
        return self.by_value is not None and self.producers is not None and self.markers is not None

    @cached_property
    def _marker_offsets(self) -> dict[int, tuple[list[int], list[tuple[int, int, int, str]]]]:
        by_producer: dict[int, list[tuple[int, int, int, str]]] = {}
        for m in sorted(self.markers or []):
            by_producer.setdefault(m[1], []).append(m)
        return {pid: ([m[0] for m in ms], ms) for pid, ms in by_producer.items()}

    def marker_after(self, offset: int, producer_id: int | None) -> tuple[int, int, int, str] | None:
        """The first end-transaction marker of ``producer_id`` after ``offset``: the end of
        the transaction a record of that producer at ``offset`` belongs to (a producer has
        at most one transaction open per partition)."""
        offsets, ms = self._marker_offsets.get(producer_id, ([], []))  # type: ignore[arg-type]
        i = bisect_right(offsets, offset)
        return ms[i] if i < len(ms) else None


@dataclass
class RunRecords:
    """What Kafka recorded of one run; either part may be missing (then ``notes`` say why)."""

    changes: list[dict[str, Any]] | None = None        # partition states after each record, in log order
    replicas: dict[int, list[Replica]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    read_time: int | None = None       # when the replicas were read, ns of history time; None when not stored

    @property
    def has_metadata(self) -> bool:
        return self.changes is not None

    def epoch_starts(self, partition: int) -> dict[int, int]:
        """Leader epoch -> its start offset (the new leader's log end when it was
        elected), from every replica's epoch checkpoint."""
        out: dict[int, int] = {}
        for r in self.replicas.get(partition, []):
            for epoch, start in r.epochs:
                out[epoch] = min(start, out.get(epoch, start))
        return out


def _ids(x: Any) -> list[int] | None:
    return None if x is None else [int(b) for b in x]


def fold_changes(records: list[dict[str, Any]], wall_ns_at_zero: int | None) -> list[dict[str, Any]]:
    """Each partition's state after every record of it, with the kind of
    election the record made: ``create`` (the partition's first record),
    ``isr`` (a new leader from the previous ISR), ``elr`` (from the previous
    eligible leader replicas, KIP-966: clean by design), ``last-leader`` (the
    partition's last known leader, elected back when its ISR and ELR were both
    empty: KIP-966's balanced recovery, Kafka's default even with unclean
    election off; it was the last ISR member, but Kafka marks it recovering
    because an unclean shutdown may have cost it unflushed data),
    ``unclean`` (from outside all of these), ``leaderless`` (leader lost), or
    None (no leader change)."""
    state: dict[int, dict[str, Any]] = {}
    out = []
    for rec in records:
        typ, d = rec.get("type"), rec.get("data") or {}
        if typ not in ("PartitionRecord", "PartitionChangeRecord"):
            continue
        p = int(d["partitionId"])
        wall_ms = rec.get("wall_ms")
        time = (None if wall_ns_at_zero is None or wall_ms is None
                else int(wall_ms) * 1_000_000 - int(wall_ns_at_zero))
        prev = state.get(p)
        if typ == "PartitionRecord" or prev is None:
            leader = int(d.get("leader", NO_LEADER))
            new = {"leader": None if leader < 0 else leader, "leader_epoch": int(d.get("leaderEpoch", 0)),
                   "isr": _ids(d.get("isr")) or [], "elr": _ids(d.get("eligibleLeaderReplicas")) or [],
                   "last_known_elr": _ids(d.get("lastKnownElr")) or [],
                   "replicas": _ids(d.get("replicas")) or [],
                   "recovering": int(d.get("leaderRecoveryState", 0) or 0) == RECOVERING}
            kind = CREATE if prev is None else (FROM_ISR if new["leader"] in prev["isr"] else UNCLEAN)
        else:
            new = dict(prev)
            leader = int(d.get("leader", NO_LEADER_CHANGE))
            kind = None
            if leader != NO_LEADER_CHANGE:
                new["leader"] = None if leader == NO_LEADER else leader
                new["leader_epoch"] = prev["leader_epoch"] + 1
                if leader == NO_LEADER:
                    kind = LEADERLESS
                elif leader in prev["isr"]:
                    kind = FROM_ISR
                elif leader in prev["elr"]:
                    kind = FROM_ELR
                elif not prev["isr"] and not prev["elr"] and prev["last_known_elr"] == [leader]:
                    kind = LAST_LEADER
                else:
                    kind = UNCLEAN
            for key, name in (("isr", "isr"), ("elr", "eligibleLeaderReplicas"),
                              ("last_known_elr", "lastKnownElr"), ("replicas", "replicas")):
                if d.get(name) is not None:
                    new[key] = _ids(d[name])
            lrs = d.get("leaderRecoveryState", -1)
            if lrs is not None and int(lrs) >= 0:
                new["recovering"] = int(lrs) == RECOVERING
        state[p] = new
        out.append({"partition": p, "offset": rec.get("offset"), "time": time, "wall_ms": wall_ms, "kind": kind,
                    "previous_leader": None if prev is None else prev["leader"],
                    "previous_isr": None if prev is None else prev["isr"],
                    "previous_elr": None if prev is None else prev["elr"], **new})
    return out


def elections(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The changes that elected a leader (not creation, not leader loss)."""
    return [c for c in changes if c["kind"] in (FROM_ISR, FROM_ELR, LAST_LEADER, UNCLEAN)]


def _header(line: str, header_key: str) -> dict[str, Any] | None:
    """A file's first line as its header: a JSON object with ``header_key``; else None."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and header_key in obj else None


def _read_ms(head: dict[str, Any]) -> int | None:
    """replicas.jsonl's ``read_wall_ms``: when the reading of Kafka's records began (wall clock)."""
    ms = head.get("read_wall_ms")
    return int(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None


def records_read_wall_ms(run_dir: Path) -> int | None:
    """When the reading of Kafka's records began, from replicas.jsonl's header
    alone (the report wants only this; ``load_records`` reads the whole file);
    None when there is no such file or header."""
    try:
        with open(Path(run_dir) / REPLICAS_FILE, encoding="utf-8", errors="replace") as fh:
            head = _header(fh.readline(), "kchaos-replicas")
    except OSError:
        return None
    return None if head is None else _read_ms(head)


def _read_jsonl(path: Path, header_key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    head: dict[str, Any] = {}
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            if n == 0 and (first := _header(line, header_key)) is not None:
                head = first
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: ignoring an unreadable line", path, n + 1)
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return head, rows


def _values(recs: list[list[Any]] | None) -> tuple[dict[int, int] | None, dict[int, int | None] | None]:
    """A listing's value -> lowest offset, and value -> the producer id at that offset
    (None for the whole listing when its rows are the 3-field ones of older runs)."""
    if recs is None:
        return None, None
    by_value: dict[int, int] = {}
    producers: dict[int, int | None] | None = {}
    for rec in recs:
        off, val = rec[0], rec[1]
        if val is None:
            continue
        val, off = int(val), int(off)
        if val not in by_value or off < by_value[val]:
            by_value[val] = off
            if producers is not None:
                producers[val] = None if len(rec) < 4 or rec[3] is None else int(rec[3])
        if len(rec) < 4:
            producers = None
    return by_value, producers


def load_records(run_dir: Path, wall_ns_at_zero: int | None) -> RunRecords:
    """The records stored in ``run_dir``; missing or unreadable parts are noted,
    never raised (the checkers then fall back on the sampler's view)."""
    run_dir = Path(run_dir)
    rr = RunRecords()
    meta = run_dir / METADATA_FILE
    if not meta.exists():
        rr.notes.append("no metadata log was stored: elections come from the sampler's view (gaps, no ELR)")
    else:
        try:
            head, rows = _read_jsonl(meta, "kchaos-metadata")
            if not any(r.get("type") == "PartitionRecord" for r in rows):
                rr.notes.append("the stored metadata log has no record of the topic's partitions: "
                                "elections come from the sampler's view")
            else:
                rr.changes = fold_changes(rows, wall_ns_at_zero)
                if wall_ns_at_zero is None:
                    rr.notes.append("the history has no wall clock at time 0: elections have no run time, "
                                    "so lost writes cannot be attributed to them")
            for node, err in (head.get("errors") or {}).items():
                rr.notes.append(f"metadata log of {node}: {err}")
        except (OSError, KeyError, ValueError, TypeError) as e:
            rr.notes.append(f"metadata log unreadable ({type(e).__name__}: {e}): "
                            "elections come from the sampler's view")
            rr.changes = None
    rep = run_dir / REPLICAS_FILE
    if rep.exists():
        try:
            head, rows = _read_jsonl(rep, "kchaos-replicas")
            read_ms = _read_ms(head)
            if read_ms is not None and wall_ns_at_zero is not None:
                rr.read_time = read_ms * 1_000_000 - int(wall_ns_at_zero)
            for r in rows:
                if r.get("error"):
                    rr.notes.append(f"replica {r.get('node')} partition {r.get('partition')}: {r['error']}")
                    continue
                by_value, producers = _values(r.get("records"))
                markers, batches = r.get("markers"), r.get("txn_batches")
                rr.replicas.setdefault(int(r["partition"]), []).append(Replica(
                    node=str(r["node"]), partition=int(r["partition"]),
                    log_start_offset=r.get("log_start_offset"), log_end_offset=r.get("log_end_offset"),
                    epochs=[(int(e), int(s)) for e, s in r.get("epochs") or []], by_value=by_value,
                    note=r.get("note"), producers=producers,
                    markers=None if markers is None else [(int(o), int(p), int(e), str(k)) for o, p, e, k in markers],
                    txn_batches=None if batches is None else [(int(b), int(l), int(p), int(e))
                                                              for b, l, p, e in batches]))
        except (OSError, KeyError, ValueError, TypeError) as e:
            rr.notes.append(f"replica listings unreadable ({type(e).__name__}: {e})")
    return rr


def presence(rr: RunRecords, partition: int, value: int) -> dict[str, Any]:
    """Where a value is in the replicas' logs: node -> offset, or "absent",
    or "not read" (the listing was over its size limit or missing)."""
    out: dict[str, Any] = {}
    for r in sorted(rr.replicas.get(partition, []), key=lambda r: r.node):
        if r.by_value is None:
            out[r.node] = "not read"
        else:
            out[r.node] = r.by_value.get(value, "absent")
    return out


# -- transactions: which end-transaction marker follows a value ------------------------------
COMMIT, ABORT, OPEN, ABSENT, NOT_READ, CONFLICT = "commit", "abort", "open", "absent", "not-read", "conflict"
SettlementState = Literal["commit", "abort", "open", "absent", "not-read", "conflict"]


@dataclass(frozen=True)
class Settlement:
    """What the replicas' logs say of the transaction a value was written in:
    ``commit`` / ``abort`` (its producer's next marker in that partition, the
    replicas holding the value agreeing), ``open`` (held, no marker of its
    producer after it), ``absent`` (in no read listing), ``not-read`` (no listing
    of the partition can tell: over max_records, unreadable, or stored before
    markers were), ``conflict`` (the replicas holding it disagree)."""

    state: SettlementState
    evidence: str


def _held_at(r: Replica, value: int) -> tuple[int, int | None, tuple[int, int, int, str] | None]:
    offset = r.by_value[value]  # type: ignore[index]
    producer = r.producers.get(value)  # type: ignore[union-attr]
    return offset, producer, r.marker_after(offset, producer)


def _said(nodes: list[str], value: int, offset: int, producer: int | None,
          marker: tuple[int, int, int, str] | None, end: int | None) -> str:
    held = f"{', '.join(nodes)}: value {value} at offset {offset} (producer {producer})"
    if marker is None:
        return f"{held}, no marker of that producer after it (log end {end})"
    return f"{held}, {marker[3]} marker at offset {marker[0]} (producer epoch {marker[2]})"


def txn_outcome(rr: RunRecords, partition: int, value: int) -> Settlement:
    """How the transaction that wrote ``value`` to ``partition`` ended, from the
    replicas' logs (docs/design.md, "Kafka's own record"). A replica holding the
    value with no marker after it agrees with the others when its log ends at or
    before their marker (it stopped replicating before the marker: a prefix of
    their log, not another history); otherwise it is a conflict."""
    replicas = sorted(rr.replicas.get(partition, []), key=lambda r: r.node)
    read = [r for r in replicas if r.txn_readable]
    unread = "; ".join(f"{r.node} not read ({r.note or 'stored without producers or markers'})"
                       for r in replicas if not r.txn_readable)
    if not read:
        return Settlement(NOT_READ, unread or f"no replica listing of partition {partition} was stored")
    holders = [r for r in read if value in r.by_value]  # type: ignore[operator]
    absent = [r.node for r in read if value not in r.by_value]  # type: ignore[operator]
    if not holders:
        return Settlement(ABSENT, f"value {value} is in none of {', '.join(absent)}'s logs of partition "
                                  f"{partition}" + (f"; {unread}" if unread else ""))
    tail = "".join(f"; {part}" for part in (absent and f"absent from {', '.join(absent)}", unread) if part)
    found = {r.node: (*_held_at(r, value), r.log_end_offset) for r in holders}
    groups: dict[tuple, list[str]] = {}
    for node, (offset, producer, marker, end) in found.items():
        groups.setdefault((offset, producer, marker, None if marker else end), []).append(node)
    evidence = "; ".join(_said(nodes, value, *key) for key, nodes in groups.items()) + tail
    kinds = {m[3] for _, _, m, _ in found.values() if m is not None}
    if not kinds:
        return Settlement(OPEN, evidence)
    first_marker = min(m[0] for _, _, m, _ in found.values() if m is not None)
    behind = all(m is not None or (end is not None and end <= first_marker) for _, _, m, end in found.values())
    if len(kinds) > 1 or not behind:
        return Settlement(CONFLICT, evidence)
    return Settlement(COMMIT if kinds.pop() == "COMMIT" else ABORT, evidence)
