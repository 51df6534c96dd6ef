"""The text of Kafka's ``DumpLogSegments`` tool, parsed: pure functions tested on
real captures (tests/broker/fixtures). broker/log_dump.py runs the tool on a node.

Field semantics (common/metadata/*.json in kafka-metadata 4.3.1):
- PartitionRecord is a partition's full state: replicas, isr, leader (-1 = no leader),
  leaderEpoch, partitionEpoch, leaderRecoveryState (0 normal, 1 recovering from an unclean election).
- PartitionChangeRecord carries only what changed; the decoder leaves unchanged fields out:
  leader absent (default -2) = no change, -1 = now no leader, else the new leader (and a new leader epoch).
- isr, replicas, eligibleLeaderReplicas, lastKnownElr: absent/null = unchanged, else the new list.
- leaderRecoveryState in a change: absent (-1) = unchanged, 0 = elected from the ISR or recovered,
  1 = elected by unclean election and still recovering. Records carry topicId, never the topic name.
- Kafka before 4.0 has no ELR (KIP-966): its records carry no eligibleLeaderReplicas or lastKnownElr.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Iterable, Sequence

from infra.errors import KchaosError

KEPT_TYPES = frozenset({
    "TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord",
    "RegisterBrokerRecord", "UnregisterBrokerRecord", "BrokerRegistrationChangeRecord",
    "FenceBrokerRecord", "UnfenceBrokerRecord"})

_DUMPING = re.compile(r"^Dumping (\S+)")
_BATCH = re.compile(r"^baseOffset: (-?\d+) lastOffset: (-?\d+) count: (\d+) .*?"
                    r"partitionLeaderEpoch: (-?\d+) .*?CreateTime: (-?\d+)")
_BATCH_COUNT = re.compile(r"^baseOffset: (-?\d+) lastOffset: -?\d+ count: (\d+) ")
_RECORD = re.compile(r"^\| offset: (\d+) ")
_PAYLOAD = re.compile(r" payload: (.*)$")
_PRODUCER = re.compile(r" producerId: (-?\d+) producerEpoch: (-?\d+) ")
_END_TXN = re.compile(r" endTxnMarker: (COMMIT|ABORT) ")
_TXN_DATA = re.compile(r" isTransactional: true isControl: false ")
_COORDINATOR_RECORD = re.compile(r" key: (.*) payload: (.*)$")


class RecordReadError(KchaosError):
    """Kafka's logs on a node could not be listed, dumped or parsed."""


def type_name(upper: str) -> str:
    """PARTITION_CHANGE_RECORD -> PartitionChangeRecord."""
    return "".join(part.capitalize() for part in upper.split("_"))


def segment_base(path: str) -> int:
    return int(posixpath.basename(path).split(".")[0])


# -- pure parsers -------------------------------------------------------------------
def _files(text: str) -> list[tuple[str, list[str]]]:
    """Split the tool's output by its "Dumping <file>" headers."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = _DUMPING.match(line)
        if m:
            out.append((m.group(1), []))
        elif out:
            out[-1][1].append(line)
    return out


def parse_metadata_dump(text: str, kept: Iterable[str] = KEPT_TYPES) -> list[dict]:
    """``--cluster-metadata-decoder`` output -> [{offset, wall_ms, type, data}] of the kept types."""
    kept = frozenset(kept)
    out: list[dict] = []
    for _, lines in _files(text):
        wall_ms = None
        for line in lines:
            b = _BATCH.match(line)
            if b:
                wall_ms = int(b.group(5))
                continue
            r = _RECORD.match(line)
            p = _PAYLOAD.search(line) if r else None
            if not p:
                continue  # control records (LeaderChange, KRaftVersion, Voters) have no payload
            try:
                payload = json.loads(p.group(1))
            except ValueError as exc:
                raise RecordReadError(f"unparseable metadata record at offset {r.group(1)}: {exc}") from exc
            kind = type_name(str(payload.get("type", "")))
            if kind in kept:
                out.append({"offset": int(r.group(1)), "wall_ms": wall_ms, "type": kind,
                            "data": payload.get("data", {})})
    return out


def parse_log_entries(text: str) -> list[list]:
    """Every record of a ``--cluster-metadata-decoder`` dump -> [offset, leader epoch of
    its batch, digest]. The digest covers the record's whole line (offset, create time,
    sizes, payload), which replication copies byte for byte; batch lines are left out
    (their file position differs between nodes)."""
    out: list[list] = []
    for _, lines in _files(text):
        epoch = None
        for line in lines:
            if b := _BATCH.match(line):
                epoch = int(b.group(4))
            elif r := _RECORD.match(line):
                out.append([int(r.group(1)), epoch, hashlib.sha1(line.strip().encode()).hexdigest()[:16]])
    return out


def short_batch(text: str) -> str | None:
    """The first batch of a dump printed record by record that is followed by fewer or
    more record lines than its ``count``, said in words; None when every batch is whole.
    (A batch line without its records is what a dump whose output lost lines looks like.)"""
    batch: tuple[int, int] | None = None
    printed = 0
    for line in [*text.splitlines(), "baseOffset: -1 lastOffset: -1 count: 0 "]:
        if line.startswith("baseOffset: "):
            if (b := _BATCH_COUNT.match(line)) is None:
                continue
            if batch is not None and printed != batch[1]:
                return f"the batch at offset {batch[0]} counts {batch[1]} records, {printed} printed"
            batch, printed = (int(b.group(1)), int(b.group(2))), 0
        elif line.startswith("| offset: "):
            printed += 1
    return None


def metadata_end_offset(text: str) -> int | None:
    ends = [int(b.group(2)) + 1 for line in text.splitlines() if (b := _BATCH.match(line))]
    return max(ends) if ends else None


def _value(raw: str):
    raw = raw.strip()
    try:
        return int(raw)
    except ValueError:
        return raw


def parse_data_dump(text: str) -> dict[str, dict]:
    """``--print-data-log`` output -> {file: {"base", "batches": [[base, last, epoch]],
    "records": [[offset, value, epoch, producer id]], "markers": [[offset, producer id,
    producer epoch, "COMMIT" | "ABORT"]], "txn_batches": [[base, last, producer id,
    producer epoch]]}} in output order. Values are ints where they parse. ``txn_batches``
    are the transactional data batches (``isTransactional: true isControl: false``): what
    a hanging transaction is made of (docs/design.md, "Kafka's own record").

    A control batch's records print no payload but ``endTxnMarker: COMMIT|ABORT
    coordinatorEpoch: N`` (the transaction markers, docs/design.md "Kafka's own
    record"); its batch line carries the producer's id and epoch. Other control
    records (KRaft's) are not kept. Without ``--print-data-log`` only batch lines
    are printed: no records and no markers."""
    out: dict[str, dict] = {}
    for path, lines in _files(text):
        seg = out.setdefault(path, {"base": segment_base(path), "batches": [], "records": [], "markers": [],
                                    "txn_batches": []})
        epoch = producer_id = producer_epoch = None
        for line in lines:
            b = _BATCH.match(line)
            if b:
                epoch = int(b.group(4))
                seg["batches"].append([int(b.group(1)), int(b.group(2)), epoch])
                pm = _PRODUCER.search(line)
                producer_id, producer_epoch = (int(pm.group(1)), int(pm.group(2))) if pm else (None, None)
                if pm and _TXN_DATA.search(line):
                    seg["txn_batches"].append([int(b.group(1)), int(b.group(2)), producer_id, producer_epoch])
                continue
            r = _RECORD.match(line)
            if not r:
                continue
            if p := _PAYLOAD.search(line):
                seg["records"].append([int(r.group(1)), _value(p.group(1)), epoch, producer_id])
            elif m := _END_TXN.search(line):
                seg["markers"].append([int(r.group(1)), producer_id, producer_epoch, m.group(1)])
    return out


def parse_share_state_dump(text: str) -> dict[str, list[dict]]:
    """``--share-group-state-decoder`` output -> {file: [{"offset", "wall_ms", "key", "value"}]}:
    the key ``{"type", "data"}`` (type "0" ShareSnapshot, "1" ShareUpdate; data the group id,
    topic id and partition) and the value ``{"version", "data"}`` (start offset, epochs and
    ``stateBatches``) as the decoder printed them; null for a tombstone (``<DELETE>``). A record
    the decoder could not read keeps its message as ``key`` (a string) and no value."""
    out: dict[str, list[dict]] = {}
    for path, lines in _files(text):
        recs = out.setdefault(path, [])
        wall_ms = None
        for line in lines:
            if b := _BATCH.match(line):
                wall_ms = int(b.group(5))
                continue
            r = _RECORD.match(line)
            m = _COORDINATOR_RECORD.search(line) if r else None
            if r and (m or " key: " in line):
                key, value = (m.group(1), m.group(2)) if m else (line.split(" key: ", 1)[1], None)
                recs.append({"offset": int(r.group(1)), "wall_ms": wall_ms, "key": _json_or_text(key),
                             "value": None if value in (None, "<DELETE>") else _json_or_text(value)})
    return out


def _json_or_text(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw.strip()


def parse_epoch_checkpoint(text: str) -> list[list[int]]:
    """leader-epoch-checkpoint: version, count, then "epoch startOffset" lines."""
    lines = [l.split() for l in text.splitlines() if l.strip()]
    if len(lines) < 2:
        raise RecordReadError(f"leader-epoch-checkpoint too short: {text!r}")
    entries = [[int(a), int(b)] for a, b in lines[2:]]
    if len(entries) != int(lines[1][0]):
        raise RecordReadError(f"leader-epoch-checkpoint says {lines[1][0]} entries, holds {len(entries)}")
    return entries


def combine_segments(segments: Sequence[dict], max_records: int | None) -> tuple[
        int | None, int | None, list | None, list | None, str | None]:
    """One partition's parsed segments (in base-offset order) -> (log start, log end,
    records, markers, note). Markers (one per transaction) are kept when the records
    are over ``max_records``, unless they are over it too."""
    batches = [b for s in segments for b in s["batches"]]
    start = batches[0][0] if batches else (segments[0]["base"] if segments else None)
    end = batches[-1][1] + 1 if batches else (segments[-1]["base"] if segments else None)
    records: list | None = [r for s in segments for r in s["records"]]
    markers: list | None = [m for s in segments for m in s.get("markers", [])]
    notes = []
    if max_records is not None and len(records) > max_records:
        notes.append(f"{len(records)} records, over max_records {max_records}: not kept")
        records = None
    if max_records is not None and len(markers) > max_records:
        notes.append(f"{len(markers)} transaction markers, over max_records {max_records}: not kept")
        markers = None
    return start, end, records, markers, "; ".join(notes) or None
