"""Kafka's own record of a run, read from a node's disk with Kafka's own tool.

``DumpLogSegments`` (what ``kafka-dump-log.sh`` runs) is started on the node
through ``Node.run``, one JVM per call for every segment at once; it only
reads files, so the broker may be running, paused or dead. Parsing the tool's
text is pure (``parse_metadata_dump``, ``parse_data_dump``,
``parse_epoch_checkpoint``) and tested on real captures.

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
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from broker.config import DATA_DIR
from infra.distribution import DEFAULT_KAFKA_VERSION, KAFKA_LIB
from infra.errors import KchaosError
from infra.kafka_versions import features, installed_version
from infra.node import Node, shell_join

METADATA_DIR = f"{DATA_DIR}/__cluster_metadata-0"
DUMP_TIMEOUT_S = 300.0
BYTES_PER_RECORD_CAP = 100  # a partition over max_records * this many bytes is not dumped record by record
MIN_BYTES_PER_RECORD = 8    # the least a record takes in a batch (its length, attributes, deltas, value)

KEPT_TYPES = frozenset({
    "TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord",
    "RegisterBrokerRecord", "UnregisterBrokerRecord", "BrokerRegistrationChangeRecord",
    "FenceBrokerRecord", "UnfenceBrokerRecord"})

_DUMPING = re.compile(r"^Dumping (\S+)")
_BATCH = re.compile(r"^baseOffset: (-?\d+) lastOffset: (-?\d+) count: (\d+) .*?"
                    r"partitionLeaderEpoch: (-?\d+) .*?CreateTime: (-?\d+)")
_RECORD = re.compile(r"^\| offset: (\d+) ")
_PAYLOAD = re.compile(r" payload: (.*)$")
_PRODUCER = re.compile(r" producerId: (-?\d+) producerEpoch: (-?\d+) ")
_END_TXN = re.compile(r" endTxnMarker: (COMMIT|ABORT) ")
_TXN_DATA = re.compile(r" isTransactional: true isControl: false ")
_COORDINATOR_RECORD = re.compile(r" key: (.*) payload: (.*)$")
SHARE_STATE_TOPIC = "__share_group_state"


class RecordReadError(KchaosError):
    """Kafka's logs on a node could not be listed, dumped or parsed."""


@dataclass
class MetadataDump:
    node: str
    records: list[dict]              # kept records, in log order
    log_start_offset: int | None     # base offset of the first segment
    end_offset: int | None           # last batch's lastOffset + 1
    segments: list[str] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)  # *.checkpoint beside the segments
    # every record, control records too: [offset, leader epoch of its batch, digest of its line]
    # (checkers/raft_log.py compares the controllers' logs with them)
    entries: list[list] = field(default_factory=list)


@dataclass
class ReplicaDump:
    node: str
    topic: str
    partition: int
    log_start_offset: int | None
    log_end_offset: int | None
    epochs: list[list[int]]
    records: list[list] | None       # [offset, value, leader epoch of its batch, producer id of its batch]
    markers: list[list] | None       # [offset, producer id, producer epoch, "COMMIT" | "ABORT"]
    note: str | None = None
    # transactional data batches [base offset, last offset, producer id, producer epoch]; None when not read
    txn_batches: list[list] | None = None


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


# -- on the node ----------------------------------------------------------------------
def node_kafka_version(node: Node, attempts: int = 3) -> str:
    """The Kafka version installed on the node, from its jars: DumpLogSegments' class depends
    on it (infra.kafka_versions). A listing that names no kafka-clients jar is tried again
    (a busy node's exec once came back empty) and then is an error, never a guess."""
    said = "no output"
    for attempt in range(attempts):
        if attempt:
            time.sleep(1.0)
        try:
            res = node.run(["ls", KAFKA_LIB], check=False, timeout=30)
        except KchaosError as exc:
            said = str(exc)
            continue
        version = installed_version(res.out.split())
        if version is not None:
            return version
        said = f"exit {res.exit}: {(res.err or res.out).strip()[:200] or 'no output'}"
    raise RecordReadError(f"{node.name}: no Kafka version in {KAFKA_LIB} ({said})")


def _dump_argv(files: Sequence[str], *flags: str, kafka_version: str = DEFAULT_KAFKA_VERSION) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF",
            "-cp", f"{KAFKA_LIB}/*", features(kafka_version).dump_log_segments_main, *flags,
            "--files", ",".join(files)]


def _run(node: Node, argv: Sequence[str], what: str, timeout: float = DUMP_TIMEOUT_S) -> str:
    try:
        res = node.run(argv, check=False, timeout=timeout)
    except KchaosError as exc:
        raise RecordReadError(f"{node.name}: {what}: {exc}") from exc
    if res.exit != 0:
        lines = [l.strip() for l in (res.err or res.out).splitlines() if l.strip()]
        first = next((l for l in lines if "Exception" in l or "rror" in l), lines[-1] if lines else "no output")
        raise RecordReadError(f"{node.name}: {what} exited {res.exit}: {first[:300]}")
    return res.out


_LISTED = "kchaos-listing-end"


def _list_files(node: Node, dirs: Sequence[str], attempts: int = 3) -> dict[str, list[tuple[str, int]]]:
    """{dir: [(file, size)]} for the dirs that exist (missing ones are left out).

    The listing ends with a mark: a node whose output came back without it (seen under
    load: a replica listing empty, exit 0, so a node's replicas were silently left out of
    replicas.jsonl) is asked again, and then is an error, never an empty listing."""
    for _ in range(attempts):
        res = node.run(["sh", "-c", f"find {shell_join(dirs)} -maxdepth 1 -type f -printf '%p %s\\n'; "
                                    f"rc=$?; echo {_LISTED} $rc"], check=False, timeout=30)
        lines = res.out.splitlines()
        if res.exit == 0 and lines and lines[-1].startswith(_LISTED + " "):
            break
    else:
        raise RecordReadError(f"{node.name}: listing {', '.join(dirs)} came back incomplete "
                              f"{attempts} times (exit {res.exit}): {res.err.strip()[:300]}")
    out: dict[str, list[tuple[str, int]]] = {}
    for line in lines[:-1]:
        path, _, size = line.rpartition(" ")
        if path and size.isdigit():
            out.setdefault(posixpath.dirname(path), []).append((path, int(size)))
    if lines[-1] != f"{_LISTED} 0" and not out and "No such file" not in res.err:
        raise RecordReadError(f"{node.name}: listing {', '.join(dirs)} failed: {res.err.strip()[:300]}")
    return {d: sorted(files) for d, files in out.items()}


def read_metadata_log(node: Node, metadata_dir: str = METADATA_DIR) -> MetadataDump:
    """Every kept record of the node's KRaft metadata log, in one JVM."""
    try:
        files = _list_files(node, [metadata_dir]).get(metadata_dir, [])
    except KchaosError as exc:
        raise RecordReadError(f"{node.name}: listing the metadata log: {exc}") from exc
    segments = [p for p, _ in files if p.endswith(".log")]
    snapshots = [posixpath.basename(p) for p, _ in files if p.endswith(".checkpoint")]
    if not segments:
        raise RecordReadError(f"{node.name}: no metadata log segments in {metadata_dir}")
    text = _run(node, _dump_argv(segments, "--cluster-metadata-decoder", kafka_version=node_kafka_version(node)),
                "dumping the metadata log")
    return MetadataDump(node.name, parse_metadata_dump(text), segment_base(segments[0]),
                        metadata_end_offset(text), segments, snapshots, parse_log_entries(text))


def read_replica_logs(node: Node, topic: str, partitions: Iterable[int], max_records: int,
                      data_dir: str = DATA_DIR) -> dict[int, ReplicaDump]:
    """Each partition of ``topic`` this node holds a replica of, with one JVM for all the logs
    printed record by record and, first, one for the batch lines of those that may be too big
    to print. Absent partitions are left out."""
    dirs = {p: f"{data_dir}/{topic}-{p}" for p in partitions}
    try:
        listing = _list_files(node, list(dirs.values()))
    except KchaosError as exc:
        raise RecordReadError(f"{node.name}: listing {topic}'s partitions: {exc}") from exc
    held = {p: d for p, d in dirs.items() if d in listing}
    if not held:
        return {}
    epochs_text = ""
    checkpoints = [f"{d}/leader-epoch-checkpoint" for d in held.values()
                   if any(f.endswith("/leader-epoch-checkpoint") for f, _ in listing[d])]
    if checkpoints:
        epochs_text = node.run(["grep", "-H", "", *checkpoints], check=False, timeout=30).out
    by_file: dict[str, list[str]] = {}
    for line in epochs_text.splitlines():
        path, _, rest = line.partition(":")
        by_file.setdefault(path, []).append(rest)
    segs = {p: sorted((f for f, _ in listing[d] if f.endswith(".log")), key=segment_base) for p, d in held.items()}
    size = {p: sum(s for f, s in listing[d] if f.endswith(".log")) for p, d in held.items()}
    parsed: dict[str, dict] = {}
    version = node_kafka_version(node)
    # Partition -> why its records and markers are not read: dumped without --print-data-log
    # (batch lines only). A log over max_records x BYTES_PER_RECORD_CAP bytes is too big to
    # print; one that may still hold more than max_records records of a batch of many (a
    # pipelined partition: about 15 bytes a record) is counted from the same batch lines: with
    # more offsets than max_records and no transactional batch, its records would not be kept
    # (combine_segments) and it has no markers, so it is not printed record by record either
    # (1M records print about 100 MB: the reading beside a 3-minute soak's drain took 210 s).
    unprinted: dict[int, str] = {}
    maybe = [p for p in held if size[p] > max_records * MIN_BYTES_PER_RECORD]
    if maybe:
        batches = parse_data_dump(_run(node, _dump_argv([f for p in maybe for f in segs[p]], kafka_version=version),
                                       f"dumping {topic} (batches only)"))
        for p in maybe:
            segments = [batches.get(f, {}) for f in segs[p]]
            offsets = sum(b[1] - b[0] + 1 for s in segments for b in s.get("batches", []))
            if size[p] > max_records * BYTES_PER_RECORD_CAP:
                unprinted[p] = (f"log is {size[p]} bytes, over {max_records} x {BYTES_PER_RECORD_CAP}: "
                                "records and markers not read")
            elif offsets > max_records and not any(s.get("txn_batches") for s in segments):
                unprinted[p] = f"{offsets} offsets, over max_records {max_records}, none transactional: records not read"
            if p in unprinted:
                parsed.update({f: batches[f] for f in segs[p] if f in batches})
    deep = [f for p in held if p not in unprinted for f in segs[p]]
    if deep:
        parsed.update(parse_data_dump(_run(node, _dump_argv(deep, "--print-data-log", kafka_version=version),
                                           f"dumping {topic}")))
    out: dict[int, ReplicaDump] = {}
    for p, d in held.items():
        cp = f"{d}/leader-epoch-checkpoint"
        epochs = parse_epoch_checkpoint("\n".join(by_file[cp])) if cp in by_file else []
        missing = [f for f in segs[p] if f not in parsed]
        segments = [parsed.get(f) or {"base": segment_base(f), "batches": [], "records": [], "markers": []}
                    for f in segs[p]]
        start, end, records, markers, note = combine_segments(segments, max_records)
        # kept with the markers: a hanging transaction is judged from both (checkers/hanging.py)
        txn_batches = None if markers is None else [b for s in segments for b in s.get("txn_batches", [])]
        if p in unprinted:  # dumped without --print-data-log: batch lines only
            records = markers = txn_batches = None
            note = unprinted[p]
        if missing:
            raise RecordReadError(f"{node.name}: the dump lacks {', '.join(missing)}")
        out[p] = ReplicaDump(node.name, topic, p, start, end, epochs, records, markers, note, txn_batches)
    return out


def read_replica_log(node: Node, topic: str, partition: int, max_records: int,
                     data_dir: str = DATA_DIR) -> ReplicaDump:
    dumps = read_replica_logs(node, topic, [partition], max_records, data_dir)
    if partition not in dumps:
        raise RecordReadError(f"{node.name}: no replica of {topic}-{partition} in {data_dir}")
    return dumps[partition]


def read_share_state(node: Node, data_dir: str = DATA_DIR) -> dict[int, list[dict]]:
    """The records of every ``__share_group_state`` replica this node holds with a non-empty log,
    decoded by Kafka's own share-group-state decoder in one JVM: {state partition: records}
    (``parse_share_state_dump``). Empty when the node holds none (no share group ran)."""
    try:
        res = node.run(["find", data_dir, "-mindepth", "2", "-maxdepth", "2", "-path",
                        f"*/{SHARE_STATE_TOPIC}-*/*.log", "-size", "+0"], check=False, timeout=30)
    except KchaosError as exc:
        raise RecordReadError(f"{node.name}: listing {SHARE_STATE_TOPIC}: {exc}") from exc
    segs = sorted(res.out.split(), key=lambda f: (posixpath.dirname(f), segment_base(f)))
    if not segs:
        return {}
    parsed = parse_share_state_dump(_run(node, _dump_argv(segs, "--share-group-state-decoder",
                                                          kafka_version=node_kafka_version(node)),
                                         f"dumping {SHARE_STATE_TOPIC}"))
    out: dict[int, list[dict]] = {}
    for f in segs:
        partition = int(posixpath.basename(posixpath.dirname(f)).rsplit("-", 1)[1])
        out.setdefault(partition, []).extend(parsed.get(f, []))
    return out
