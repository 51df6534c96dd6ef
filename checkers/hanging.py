"""hanging-transaction: transactional data Kafka keeps open for good (KIP-664, KIP-890).

Definition (docs/design.md, "What the checkers decide", hanging transactions): on a
partition, a producer id's transactional data (a ``txn_batches`` entry of a replica's
listing) with no end-transaction marker of that producer after it, up to the log end,
on every replica that was read; and the replicas were read more than the run's
``transaction.timeout.ms`` plus the coordinator's abort-check interval
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) plus
``MARKER_GRACE_MS`` after the workload ended, so a coordinator that knew of the
transaction would have aborted it and written its markers by then. Such data holds the
partition's last stable offset: read_committed consumers stop in front of it.

Times, in ns of history time: the workload's writes ended by the final drain's first
invoke (by then every worker has stopped and the protocol proxy's held requests were
delivered or dropped at the final heal: docs/design.md, "One run, end to end"); the
replicas were read at the replicas header's ``read_wall_ms``, or, for runs stored
before it, no earlier than the drain's last completion. One finding per (partition,
producer id, first open offset); the drain's own view (a last stable offset stuck
there) is its cross-check. When the record cannot tell (no listing of a partition
with transaction data, or read too soon), the reason goes into
``stats["hanging_unknown"]`` and the verdict cannot be valid; a partition no listing
can tell whose final drain read it to its end had no transaction open then (an open
one holds the last stable offset, so the drain could not have finished). A history
checked with neither a listing nor a final drain is not judged (``stats["hanging"]``
says so): nothing in it was meant to tell.

Pure and standard library only: both engines hand over the writers of the open values
(``wanted``) and the drain's ops; ``judge`` runs once, after either engine.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from .kafka_record import RunRecords

if TYPE_CHECKING:
    from .common import RunFindings, Settings

# librdkafka's and the Java client's default transaction.timeout.ms: for runs that did not store theirs
DEFAULT_TXN_TIMEOUT_MS = 60_000
# Kafka's default transaction.abort.timed.out.transaction.cleanup.interval.ms
DEFAULT_ABORT_INTERVAL_MS = 10_000
ABORT_INTERVAL = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
# the coordinator's abort after it notices the timeout: a write to __transaction_state and the
# markers to each partition, well under this on a healed cluster
MARKER_GRACE_MS = 5_000
# what workloads/drain.py writes when a partition's drain stops at an open transaction
_STUCK = re.compile(r"drain of partition (\d+) incomplete: .*the last stable offset is (\d+), a transaction still open")
_PARTITION = re.compile(r"drain of partition (\d+)")


@dataclass(frozen=True)
class OpenSpan:
    """One producer's transactional data on a partition with no marker of it after."""

    partition: int
    producer_id: int
    producer_epoch: int
    first_offset: int
    offsets: tuple[int, ...]
    values: tuple[int, ...]
    nodes: tuple[str, ...]
    log_end: int | None


@dataclass
class DrainView:
    """What the final drain's ops say: when it began and ended, the partitions it read
    to their end, and where it stopped at an open transaction (partition -> last stable offset)."""

    start: int | None = None
    end: int | None = None
    complete: set[int] = field(default_factory=set)
    stuck: dict[int, int] = field(default_factory=dict)


def drain_view(rows: Iterable[dict[str, Any]]) -> DrainView:
    """From drain poll rows (``to_row()`` form: role, f, drain, type, invoke_time, time,
    partitions, error), in any order."""
    view = DrainView()
    ok: set[int] = set()
    stopped: set[int] = set()
    for r in rows:
        if not (r.get("role") == "client" and r.get("f") == "poll" and r.get("drain")):
            continue
        view.start = r["invoke_time"] if view.start is None else min(view.start, r["invoke_time"])
        if r.get("time") is not None:
            view.end = r["time"] if view.end is None else max(view.end, r["time"])
        if r.get("type") == "ok":
            ok.update(r.get("partitions") or ())
            continue
        text = r.get("error") or ""
        if m := _STUCK.search(text):
            view.stuck[int(m.group(1))] = int(m.group(2))
        if m := _PARTITION.search(text):
            stopped.add(int(m.group(1)))
    view.complete = ok - stopped
    return view


def open_spans(records: RunRecords) -> tuple[list[OpenSpan], dict[int, str]]:
    """Every producer's open transactional data per partition, and the partitions
    with listings none of which can tell (partition -> why)."""
    spans: list[OpenSpan] = []
    blind: dict[int, str] = {}
    for p, replicas in sorted(records.replicas.items()):
        read = [r for r in replicas if r.txn_readable and r.txn_batches is not None]
        if not read:
            blind[p] = "; ".join(f"{r.node}: {r.note or 'stored without transaction batches'}" for r in replicas)
            continue
        found: dict[tuple[int, int], dict[str, Any]] = {}
        for r in read:
            at = {o: v for v, o in (r.by_value or {}).items()}
            first: dict[int, tuple[int, int]] = {}        # producer -> (first open offset, its epoch)
            for base, last, pid, epoch in sorted(r.txn_batches or []):
                if r.marker_after(last, pid) is None and pid not in first:
                    first[pid] = (base, epoch)
            for pid, (base, epoch) in first.items():
                span = found.setdefault((pid, base), {"epoch": epoch, "offsets": set(), "nodes": [], "end": None})
                span["nodes"].append(r.node)
                span["end"] = max(span["end"] or 0, r.log_end_offset or 0)
                for b, last, q, _ in r.txn_batches or []:
                    if q == pid and b >= base:
                        span["offsets"].update(o for o in range(b, last + 1) if o in at)
                span.setdefault("values", {}).update({o: at[o] for o in span["offsets"]})
        for (pid, base), s in sorted(found.items(), key=lambda kv: kv[0][1]):
            if any(r.marker_after(base, pid) is not None for r in read):
                continue      # another replica holds its marker: this one stopped before it
            offsets = tuple(sorted(s["offsets"]))
            spans.append(OpenSpan(p, pid, s["epoch"], base, offsets, tuple(s["values"][o] for o in offsets),
                                  tuple(sorted(s["nodes"])), s["end"]))
    return spans, blind


def wanted(records: RunRecords | None) -> set[tuple[int, int]]:
    """(partition, value) of every open span's records: the engines find their writers."""
    if records is None or not records.replicas:
        return set()
    return {(s.partition, v) for s in open_spans(records)[0] for v in s.values}


def _ms(settings: dict[str, Any] | None, key: str) -> int | None:
    v = (settings or {}).get(key)
    return None if v is None else int(v)


def abort_deadline_ms(settings: "Settings") -> tuple[int, str]:
    """How long after its last write a transaction the coordinator knew of is surely
    aborted, and how that was reckoned."""
    producer = (settings.client_settings or {}).get("producer") or {}
    timeout = _ms(producer, "transaction.timeout.ms")
    said = f"transaction.timeout.ms {timeout}"
    if timeout is None:
        timeout = max(DEFAULT_TXN_TIMEOUT_MS, _ms(producer, "message.timeout.ms") or 0,
                      _ms(producer, "delivery.timeout.ms") or 0)
        said = f"transaction.timeout.ms not stored, taken as {timeout}"
    interval = _ms(settings.broker_settings, ABORT_INTERVAL) or DEFAULT_ABORT_INTERVAL_MS
    return timeout + interval + MARKER_GRACE_MS, f"{said} + abort check every {interval} + {MARKER_GRACE_MS} ms"


def judge(rf: "RunFindings", records: RunRecords | None, settings: "Settings") -> None:
    """Fill in ``rf.anomalies["hanging-transaction"]`` and ``rf.stats["hanging"]``
    (and ``rf.stats["hanging_unknown"]`` when the record cannot tell)."""
    from .common import Finding, Witness    # here: common imports this module at its top
    ops = (rf.stats.get("ops") or {})
    if "txn" not in ops:
        rf.anomalies["hanging-transaction"] = Finding()
        return
    records = records or RunRecords()
    view = rf.drain_view or DrainView()
    spans, blind = open_spans(records)
    deadline, reckoned = abort_deadline_ms(settings)
    if records.read_time is not None:
        read_at, read_basis = records.read_time, "read_wall_ms"
    else:
        read_at, read_basis = view.end, "no earlier than the final drain's end"
    after = None if read_at is None or view.start is None else read_at - view.start
    unknown: list[str] = []
    found: list[tuple[tuple, Witness]] = []
    for s in spans:
        if after is None:
            unknown.append(f"partition {s.partition}: producer {s.producer_id}'s data from offset {s.first_offset} "
                           f"has no marker, and the history does not say when the workload ended (no final drain)")
            continue
        if after <= deadline * 1_000_000:
            unknown.append(f"partition {s.partition}: producer {s.producer_id}'s data from offset {s.first_offset} "
                           f"has no marker, but the replicas were read {after / 1e9:.1f} s after the workload "
                           f"ended, within {deadline / 1000:g} s ({reckoned}): its coordinator may abort it yet")
            continue
        stuck = view.stuck.get(s.partition)
        drain = ("no final drain of the partition" if stuck is None and s.partition not in view.complete
                 else f"stopped at last stable offset {stuck}" if stuck is not None
                 else "read the partition to the end it aimed at")
        ids = [i for v in s.values if (i := rf.writers.get((s.partition, v))) is not None]
        found.append(((s.partition, s.first_offset, s.producer_id), Witness(
            s.partition, list(s.offsets), list(s.values), sorted(set(ids)),
            extra={"producer_id": s.producer_id, "producer_epoch": s.producer_epoch, "first_offset": s.first_offset,
                   "replicas": list(s.nodes), "log_end": s.log_end, "read_after_s": round(after / 1e9, 1),
                   "abort_deadline_s": deadline / 1000, "drain": drain})))
    parts = set(records.replicas) | view.complete | set(view.stuck)
    for p in sorted(parts - {s.partition for s in spans}):
        if p in records.replicas and p not in blind:
            continue              # read, and nothing open
        if p in view.complete:
            continue              # the drain read it read_committed to its end: nothing was open then
        why = blind.get(p, "no replica listing was stored")
        where = (f"the final drain stopped at last stable offset {view.stuck[p]}, a transaction still open"
                 if p in view.stuck else "the final drain did not read it to its end")
        unknown.append(f"partition {p}: no replica listing can say whether a transaction hangs ({why}); {where}")
    found.sort(key=lambda kw: kw[0])
    rf.anomalies["hanging-transaction"] = Finding(count=len(found),
                                                  witnesses=[w for _, w in found[: settings.max_witnesses]])
    rf.stats["hanging"] = {"open_spans": len(spans), "abort_deadline_s": deadline / 1000, "reckoned": reckoned,
                           "read_after_s": None if after is None else round(after / 1e9, 1),
                           "read_time": read_basis,
                           **({} if parts else {"not_judged": "no replica listing and no final drain"})}
    if unknown:
        rf.stats["hanging_unknown"] = unknown
