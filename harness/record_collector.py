"""Kafka's own record of a run, kept in the run folder before the cluster goes
(docs/design.md, "The store"): ``metadata.jsonl`` (the KRaft log's topic and
partition records), ``replicas.jsonl`` (every replica's log, transaction
markers and epochs) and, when a share group ran, ``share-state.jsonl``
(every ``__share_group_state`` replica's records, decoded by Kafka).

Read from every node at once through ``broker.log_dump``; a node that cannot be
read becomes an error entry, never an exception: the run must still end and
be analysed.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

from broker.cluster import KafkaCluster
from broker.config import DYNAMIC_QUORUM, broker_id
from broker.log_dump import (SHARE_STATE_TOPIC, MetadataDump, ReplicaDump, read_metadata_log, read_replica_logs,
                             read_share_state)
from broker.quorum_tool import controller_bootstrap, describe, parse_replication, parse_status
from broker.txn_tool import find_hanging
from infra.node import parallel

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.jsonl"
REPLICAS_FILE = "replicas.jsonl"
SHARE_STATE_FILE = "share-state.jsonl"
RAFT_LOG_FILE = "raft-log.jsonl"   # read by checkers/raft_log.py
FIND_HANGING_FILE = "kafka-transactions.jsonl"
TOPIC_TYPES = ("TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord")


def _read_node(node, topic: str, partitions: list[int], max_records: int) -> dict[str, Any]:
    out: dict[str, Any] = {"node": node.name, "metadata": None, "metadata_error": None,
                           "replicas": {}, "replicas_error": None}
    try:
        out["metadata"] = read_metadata_log(node)
    except Exception as exc:  # a dead or unreachable node: an entry, not a failed teardown
        out["metadata_error"] = str(exc)
    try:
        out["replicas"] = read_replica_logs(node, topic, partitions, max_records)
    except Exception as exc:
        out["replicas_error"] = str(exc)
    try:     # share groups' persisted state (KIP-932): present only when a share group ran
        out["share_state"] = read_share_state(node)
    except Exception as exc:
        out["share_state_error"] = str(exc)
    return out


def topic_id_of(records: list[dict], topic: str) -> str | None:
    """The id of the newest TopicRecord named ``topic``."""
    ids = [r["data"].get("topicId") for r in records if r["type"] == "TopicRecord" and r["data"].get("name") == topic]
    return ids[-1] if ids else None


def disagreements(source: MetadataDump, other: MetadataDump) -> str | None:
    """Where ``other`` differs from ``source`` on the offsets both logs hold."""
    common = min(source.end_offset or 0, other.end_offset or 0)
    start = max(source.log_start_offset or 0, other.log_start_offset or 0)
    a = [(r["offset"], r["type"], r["data"]) for r in source.records if start <= r["offset"] < common]
    b = [(r["offset"], r["type"], r["data"]) for r in other.records if start <= r["offset"] < common]
    if a == b:
        return None
    for x, y in zip(a + [None], b + [None]):
        if x != y:
            return (f"metadata log differs from {source.node}'s below offset {common}: "
                    f"{source.node} has {x and x[:2]}, {other.node} has {y and y[:2]}")
    return None


def metadata_lines(dumps: dict[str, MetadataDump], errors: dict[str, str], topic: str) -> list[dict]:
    """Header and topic records of the longest metadata log; disagreements go into ``errors``."""
    header: dict[str, Any] = {"kchaos-metadata": 1, "topic": topic, "topic_id": None, "source": None,
                              "records_per_node": {n: len(d.records) for n, d in sorted(dumps.items())},
                              "end_offset_per_node": {n: d.end_offset for n, d in sorted(dumps.items())},
                              "log_start_offset": None, "snapshot": False, "errors": errors}
    if not dumps:
        return [header]
    source = max(dumps.values(), key=lambda d: (d.end_offset or 0, len(d.records), d.node))
    for name, dump in sorted(dumps.items()):
        if name != source.node and (why := disagreements(source, dump)):
            errors[name] = why
    tid = topic_id_of(source.records, topic)
    header.update(topic_id=tid, source=source.node, log_start_offset=source.log_start_offset,
                  snapshot=bool(source.snapshots))
    if source.snapshots:
        header["snapshots"] = source.snapshots
    if tid is None:
        errors.setdefault(source.node, f"no TopicRecord for {topic!r} in {source.node}'s metadata log")
    body = [{"offset": r["offset"], "wall_ms": r["wall_ms"], "type": r["type"], "data": r["data"]}
            for r in source.records if tid is not None and r["type"] in TOPIC_TYPES
            and r["data"].get("topicId") == tid]
    return [header, *body]


def replica_line(node: str, partition: int, dump: ReplicaDump | None, error: str | None) -> dict:
    return {"node": node, "broker": broker_id(node), "partition": partition,
            "log_start_offset": dump.log_start_offset if dump else None,
            "log_end_offset": dump.log_end_offset if dump else None,
            "epochs": dump.epochs if dump else None, "records": dump.records if dump else None,
            "markers": dump.markers if dump else None, "txn_batches": dump.txn_batches if dump else None,
            "note": dump.note if dump else None, "error": error}


def quorum_describe(kafka_cluster: KafkaCluster, what: str = "status") -> tuple[str, str | None]:
    """``kafka-metadata-quorum describe --<what>`` on the first controller that
    answers: (its text, None) or ("", why not). Never raises: a witness, not the run."""
    boot = controller_bootstrap([n.address for n in kafka_cluster.controller_nodes])
    why: str | None = "no controller answered"
    for node in kafka_cluster.controller_nodes:
        try:
            answer = describe(node, boot, what)
        except Exception as exc:  # noqa: BLE001 - a dead node: ask the next
            why = f"{node.name}: {exc}"
            continue
        if answer.ok:
            return answer.text, None
        why = answer.summary()
    return "", why


def quorum_described(kafka_cluster: KafkaCluster) -> bool:
    """Whether a run describes its quorum (a JVM of a few seconds per describe, which
    every combined-mode run's teardown would pay): a dynamic quorum, or separate
    controllers. Without a describe the controllers' logs are compared below the newest
    snapshot only, and a short run has none (checkers/raft_log.py)."""
    return (kafka_cluster.settings.quorum == DYNAMIC_QUORUM
            or bool(kafka_cluster.controller_names))


def raft_log_lines(kafka_cluster: KafkaCluster, dumps: dict[str, MetadataDump], before: str,
                   errors: dict[str, str]) -> list[dict]:
    """raft-log.jsonl: the quorum as described before and after the logs were
    read, and every controller's whole metadata log (offset, epoch, digest)."""
    described = quorum_described(kafka_cluster)
    after, why = quorum_describe(kafka_cluster) if described else ("", None)
    replication, why_rep = quorum_describe(kafka_cluster, "replication") if described else ("", None)
    status_before, status_after = parse_status(before), parse_status(after)
    head = {"kchaos-raft-log": 1, "high_watermark": status_before.get("high_watermark"),
            "status_before": status_before, "status_after": status_after,
            "replication": parse_replication(replication), "status_text": after, "replication_text": replication,
            "errors": {**{k: v for k, v in errors.items()},
                       **({"describe --status": why} if why else {}),
                       **({"describe --replication": why_rep} if why_rep else {})}}
    names = {n.name for n in kafka_cluster.controller_nodes}
    return [head, *({"node": d.node, "log_start_offset": d.log_start_offset, "end_offset": d.end_offset,
                     "snapshots": d.snapshots, "entries": d.entries}
                    for name, d in sorted(dumps.items()) if name in names)]


def _write_jsonl(path: Path, lines: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    tmp.replace(path)


def collect_records(kafka_cluster: KafkaCluster, run_dir: Path, topic: str, partitions: int,
                    max_records: int = 200_000) -> dict[str, Any]:
    """Write ``metadata.jsonl``, ``replicas.jsonl``, ``raft-log.jsonl`` (and ``share-state.jsonl``
    when a node holds share-group state) into ``run_dir``; return a summary.
    The replicas' header says when the reading began (``read_wall_ms``): a transaction
    still open then is judged by how long after the workload that was (checkers/hanging.py)."""
    t0 = time.monotonic()
    read_wall_ms = time.time_ns() // 1_000_000
    parts = list(range(partitions))
    # its high watermark bounds what is committed (quorum_described says of which clusters)
    status_before, why = (quorum_describe(kafka_cluster) if quorum_described(kafka_cluster)
                          else ("", "combined static quorum: not described"))
    results = parallel(lambda n: _read_node(n, topic, parts, max_records), kafka_cluster.nodes)
    errors: dict[str, str] = {}
    dumps: dict[str, MetadataDump] = {}
    replicas: list[dict] = []
    for res in results:
        name = res["node"]
        if res["metadata"] is not None:
            dumps[name] = res["metadata"]
        else:
            errors[name] = res["metadata_error"]
        if kafka_cluster.role_of(name) == "controller":
            continue  # a controller-only node holds the metadata log and no replica
        if res["replicas_error"]:
            replicas += [replica_line(name, p, None, res["replicas_error"]) for p in parts]
        else:
            replicas += [replica_line(name, p, d, None) for p, d in sorted(res["replicas"].items())]
    share_state = [{"node": res["node"], "broker": broker_id(res["node"]), "partition": p, "records": recs}
                   for res in results for p, recs in sorted(res.get("share_state", {}).items())]
    share_state += [{"node": res["node"], "error": res["share_state_error"]}
                    for res in results if res.get("share_state_error")]
    run_dir = Path(run_dir)
    _write_jsonl(run_dir / RAFT_LOG_FILE, raft_log_lines(
        kafka_cluster, dumps, status_before, {**errors, **({"describe --status before": why} if why else {})}))
    meta = metadata_lines(dumps, errors, topic)
    _write_jsonl(run_dir / METADATA_FILE, meta)
    _write_jsonl(run_dir / REPLICAS_FILE,
                 [{"kchaos-replicas": 1, "topic": topic, "max_records": max_records,
                   "read_wall_ms": read_wall_ms}, *replicas])
    if any("records" in line for line in share_state):     # a share group ran
        _write_jsonl(run_dir / SHARE_STATE_FILE, [{"kchaos-share-state": 1, "topic": SHARE_STATE_TOPIC,
                                                   "read_wall_ms": read_wall_ms}, *share_state])
    elapsed = time.monotonic() - t0
    summary = {"seconds": round(elapsed, 2), "metadata_records": len(meta) - 1, "replicas": len(replicas),
               "errors": {**errors, **{f"{r['node']}/{r['partition']}": r["error"] for r in replicas if r["error"]}}}
    log.info("read Kafka's records from %d nodes in %.1fs: %d metadata records, %d replica logs%s",
             len(kafka_cluster.nodes), elapsed, summary["metadata_records"], len(replicas),
             f", errors: {summary['errors']}" if summary["errors"] else "")
    return summary


def collect_find_hanging(kafka_cluster: KafkaCluster, run_dir: Path) -> int | None:
    """``kafka-transactions.sh find-hanging`` for every broker, run on the first broker
    node, into ``kafka-transactions.jsonl`` (a header, then one line per broker: its
    exit, the parsed rows, the text). Returns how many hanging transactions Kafka
    listed, or None when no broker answered; never raises (a witness, not the run)."""
    nodes = kafka_cluster.broker_nodes
    if not nodes:
        return None
    try:
        results = find_hanging(nodes[0], kafka_cluster.bootstrap(), [broker_id(n.name) for n in nodes])
    except Exception as exc:
        log.warning("kafka-transactions find-hanging failed: %s", exc)
        return None
    _write_jsonl(Path(run_dir) / FIND_HANGING_FILE,
                 [{"kchaos-find-hanging": 1, "node": nodes[0].name, "read_wall_ms": time.time_ns() // 1_000_000},
                  *results])
    answered = [r for r in results if r["exit"] == 0]
    found = sum(len(r["rows"]) for r in answered)
    log.info("kafka-transactions find-hanging: %d of %d brokers answered, %d hanging transaction(s)",
             len(answered), len(results), found)
    return found if answered else None


class RecordReading:
    """Kafka's record of one run (``collect_records``), read once before the nodes go.

    A run whose checks do not time the reading reads it in a thread beside the final
    drain: the drain only reads the topic, so the replicas' data and the metadata log are
    what they will be, and one after the other the two took 99 s and 24 s after a
    10-minute run (docs/benchmarks.md, "A 10-minute soak"). A run with transactions reads
    it after the drain: the hanging-transaction check counts how long after the
    workload the replicas were read (checkers/hanging.py), and beside the drain that
    would always be too soon to tell."""

    def __init__(self, kafka_cluster: KafkaCluster, run_dir: Path, topic: str, partitions: int):
        self._args = (kafka_cluster, run_dir, topic, partitions)
        self._thread: threading.Thread | None = None
        self._done = False

    def begin_beside_drain(self) -> None:
        if self._thread is None and not self._done:
            log.info("reading Kafka's record beside the final drain")
            self._thread = threading.Thread(target=self._read, name="kchaos-records", daemon=True)
            self._thread.start()

    def finish(self) -> None:
        """Wait for the reading begun beside the drain, or read now."""
        if self._thread is not None:
            self._thread.join()
        elif not self._done:
            self._read()

    def _read(self) -> None:
        self._done = True
        try:
            collect_records(*self._args)
        except Exception as exc:  # noqa: BLE001 - the run must still end and be analysed
            log.warning("reading Kafka's records failed: %s", exc)
