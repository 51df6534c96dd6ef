"""Kafka 3.8.1 on real containers: a short run under broker kills is valid and its records
are read; transactions commit and abort as read_committed and read_uncommitted readers see.

One cluster for the module: the run keeps it (``keep_cluster``), the other tests use it,
and the module takes it down. About 3 minutes on a loaded 2-core machine.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest

pytestmark = pytest.mark.cluster

VERSION = "3.8.1"   # the last 3.8 release on Maven Central


@pytest.fixture(scope="module")
def run38(tmp_path_factory):
    from harness.run_config import NemesisConfig, RunConfig
    from harness.runner import Runner
    store = tmp_path_factory.mktemp("store38")
    cfg = RunConfig(name="k38", seed=38, kafka_version=VERSION, time_limit=25, keep_cluster=True,
                    store=str(store), nemesis=NemesisConfig(faults=["kill"], interval=8),
                    producer={"acks": "all", "enable.idempotence": True})
    runner = Runner(cfg)
    try:
        outcome = runner.execute()
        yield outcome, runner.cluster
    finally:
        if runner.cluster is not None:
            runner.cluster.down()


def test_short_run_under_kills_is_valid_and_reads_kafkas_record(run38):
    outcome, _ = run38
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert outcome.exit_code == 0 and results["valid"] is True, results.get("unknown")
    history = (outcome.run_dir / "history.jsonl").read_text()
    assert '"fault": "kill"' in history or '"fault":"kill"' in history, "no kill fault ran"

    lines = [json.loads(l) for l in (outcome.run_dir / "metadata.jsonl").read_text().splitlines()]
    head, records = lines[0], lines[1:]
    assert head["errors"] == {}
    parts = [r for r in records if r["type"] == "PartitionRecord"]
    assert len(parts) == 3
    # 3.8 has no Eligible Leader Replicas (KIP-966): its records carry no ELR fields.
    assert not any("eligibleLeaderReplicas" in r["data"] or "lastKnownElr" in r["data"] for r in records)

    replicas = [json.loads(l) for l in (outcome.run_dir / "replicas.jsonl").read_text().splitlines()[1:]]
    assert len(replicas) == 9 and not any(r.get("error") for r in replicas)
    assert sum(len(r["records"] or []) for r in replicas) > 0

    # read beside the final drain (harness/record_collector.RecordReading), yet complete: every
    # acknowledged value of the history is in some replica's listing
    assert "reading Kafka's record beside the final drain" in (outcome.run_dir / "kchaos.log").read_text()
    listed = {(r["partition"], rec[1]) for r in replicas for rec in (r["records"] or [])}  # [offset, value, ..]
    acked = {(m[0], m[1]) for op in map(json.loads, history.splitlines())   # messages: [partition, value, offset]
             if op.get("f") == "send" and op.get("type") == "ok" for m in (op.get("value") or [])
             if m[2] is not None}
    assert acked and acked <= listed, sorted(acked - listed)[:10]

    server_log = (outcome.run_dir / "nodes" / "n1" / "server.log").read_text()
    assert f"Kafka version: {VERSION}" in server_log   # log4j2 got the broker's logs, not reload4j


def _read(bootstrap: str, topic: str, isolation: str, timeout_s: float = 30.0) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t38-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "log_level": 0})
    out: list[bytes] = []
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                break
    finally:
        c.close()
    return out


def test_transactions_commit_and_abort_on_3_8(run38):
    from confluent_kafka import Producer
    _, cluster = run38
    kafka = cluster.kafka
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    p = Producer({"bootstrap.servers": kafka.bootstrap(), "transactional.id": f"t38-{uuid.uuid4().hex[:6]}",
                  "acks": "all", "enable.idempotence": True, "log_level": 0})
    p.init_transactions(60)
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
        p.begin_transaction()
        p.produce(topic, value=value, partition=0)
        if commit:
            p.commit_transaction(60)
        else:
            p.flush(60)   # librdkafka purges what an abort finds unsent: send it, so there is something to hide
            p.abort_transaction(60)
    assert _read(kafka.bootstrap(), topic, "read_committed") == [b"c1", b"c2"]
    assert _read(kafka.bootstrap(), topic, "read_uncommitted") == [b"c1", b"a1", b"c2"]
    # The transaction state log kchaos's server.properties asks for: 3 replicas on 3 nodes.
    md = kafka.admin().list_topics(topic="__transaction_state", timeout=10)
    parts = md.topics["__transaction_state"].partitions
    assert parts and all(len(pm.replicas) == 3 for pm in parts.values())


def test_records_read_a_transactional_partition_on_3_8(run38):
    """DumpLogSegments' class on 3.8 is core's kafka.tools one; control batches carry no payload."""
    from broker.log_dump import node_kafka_version, read_replica_logs
    _, cluster = run38
    kafka = cluster.kafka
    topics = kafka.admin().list_topics(timeout=10).topics
    topic = next(t for t in topics if t.startswith("txn-"))
    node = kafka.nodes[0]
    assert node_kafka_version(node) == VERSION
    dump = read_replica_logs(node, topic, [0], max_records=1000)[0]
    assert [r[1] for r in dump.records] == ["c1", "a1", "c2"]
    assert dump.log_end_offset == 6   # three data records and three markers
    # each data record's producer, and each transaction's marker after it (3.8's DumpLogSegments prints them too)
    [producer] = {r[3] for r in dump.records}
    assert [(m[0], m[1], m[3]) for m in dump.markers] == [(1, producer, "COMMIT"), (3, producer, "ABORT"),
                                                          (5, producer, "COMMIT")]
