"""Kafka's own record of a run, read from a node's disk with Kafka's own tool.

``DumpLogSegments`` (what ``kafka-dump-log.sh`` runs) is started on the node
through ``Node.run``, one JVM per call for every segment at once; it only
reads files, so the broker may be running, paused or dead. Its text is parsed
by broker/dump_text.py (pure, tested on real captures), which also says what
the metadata records' fields mean.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from broker.config import DATA_DIR
from broker.dump_text import (RecordReadError, combine_segments, metadata_end_offset, parse_data_dump,
                              parse_epoch_checkpoint, parse_log_entries, parse_metadata_dump, parse_share_state_dump,
                              segment_base, short_batch)
from infra.distribution import DEFAULT_KAFKA_VERSION, KAFKA_LIB
from infra.errors import KchaosError
from infra.kafka_versions import features, installed_version
from infra.node import CommandResult, Node, run_read

METADATA_DIR = f"{DATA_DIR}/__cluster_metadata-0"
DUMP_TIMEOUT_S = 300.0
BYTES_PER_RECORD_CAP = 100  # a partition over max_records * this many bytes is not dumped record by record
MIN_BYTES_PER_RECORD = 8    # the least a record takes in a batch (its length, attributes, deltas, value)

SHARE_STATE_TOPIC = "__share_group_state"


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


# -- on the node ----------------------------------------------------------------------
def node_kafka_version(node: Node) -> str:
    """The Kafka version installed on the node, from its jars: DumpLogSegments' class depends
    on it (infra.kafka_versions). A listing that names no kafka-clients jar is an error,
    never a guess."""
    res = _read(node, ["ls", KAFKA_LIB], f"listing {KAFKA_LIB}", timeout=30)
    version = installed_version(res.out.split()) if res.exit == 0 else None
    if version is None:
        said = f"exit {res.exit}: {(res.err or res.out).strip()[:200] or 'no output'}"
        raise RecordReadError(f"{node.name}: no Kafka version in {KAFKA_LIB} ({said})")
    return version


def _dump_argv(files: Sequence[str], *flags: str, kafka_version: str = DEFAULT_KAFKA_VERSION) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF",
            "-cp", f"{KAFKA_LIB}/*", features(kafka_version).dump_log_segments_main, *flags,
            "--files", ",".join(files)]


def _read(node: Node, argv: Sequence[str], what: str, timeout: float,
          short: Callable[[str], str | None] | None = None) -> CommandResult:
    """``argv``'s result with its output whole (infra.node.run_read): a node that cannot be
    asked, or whose output stays cut, is a RecordReadError."""
    try:
        return run_read(node, argv, timeout, short)
    except KchaosError as exc:
        raise RecordReadError(f"{node.name}: {what}: {exc}") from exc


def _run(node: Node, argv: Sequence[str], what: str, timeout: float = DUMP_TIMEOUT_S,
         short: Callable[[str], str | None] | None = None) -> str:
    """The whole stdout of a dump; a non-zero exit is an error."""
    res = _read(node, argv, what, timeout, short)
    if res.exit != 0:
        lines = [l.strip() for l in (res.err or res.out).splitlines() if l.strip()]
        first = next((l for l in lines if "Exception" in l or "rror" in l), lines[-1] if lines else "no output")
        raise RecordReadError(f"{node.name}: {what} exited {res.exit}: {first[:300]}")
    return res.out


def _list_files(node: Node, dirs: Sequence[str]) -> dict[str, list[tuple[str, int]]]:
    """{dir: [(file, size)]} for the dirs that exist (missing ones are left out)."""
    what = f"listing {', '.join(dirs)}"
    res = _read(node, ["find", *dirs, "-maxdepth", "1", "-type", "f", "-printf", "%p %s\\n"], what, timeout=30)
    out: dict[str, list[tuple[str, int]]] = {}
    for line in res.out.splitlines():
        path, _, size = line.rpartition(" ")
        if path and size.isdigit():
            out.setdefault(posixpath.dirname(path), []).append((path, int(size)))
    if res.exit != 0 and not out and "No such file" not in res.err:
        raise RecordReadError(f"{node.name}: {what} failed: {res.err.strip()[:300]}")
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
                "dumping the metadata log", short=short_batch)
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
        epochs_text = _read(node, ["grep", "-H", "", *checkpoints], "reading leader-epoch-checkpoints", timeout=30).out
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
                                           f"dumping {topic}", short=short_batch)))
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
    listed = _read(node, ["find", data_dir, "-mindepth", "2", "-maxdepth", "2", "-path",
                          f"*/{SHARE_STATE_TOPIC}-*/*.log", "-size", "+0"], f"listing {SHARE_STATE_TOPIC}", timeout=30)
    segs = sorted(listed.out.split(), key=lambda f: (posixpath.dirname(f), segment_base(f)))
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
