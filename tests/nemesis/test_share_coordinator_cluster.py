"""The share-coordinator target on a real 4.3.1 cluster (nemesis/roles.py):
after a share group accepts records of every partition, the
``__share_group_state`` partition the target computes for each share-partition
is the one whose log Kafka wrote, and the target names its leader; Kafka's
share-group-state decoder reads that state back."""
from __future__ import annotations

import random
import time

import pytest

from broker.config import DATA_DIR
from broker.log_dump import read_share_state
from tests.kafka_io import produce

pytestmark = pytest.mark.cluster

P = 3


def _accept_everything(bootstrap: str, topic: str, group: str, count: int) -> int:
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": bootstrap})
    reset = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([reset], request_timeout=10).values():
        fut.result()
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 40
    try:
        while seen < count and time.monotonic() < deadline:
            seen += len(consumer.poll(0.5) or [])   # implicit mode: the next poll accepts these
        consumer.commit_sync(10)
    finally:
        consumer.close()
    return seen


def test_the_share_coordinator_is_where_kafka_writes_the_share_partitions_state(kafka_cluster, topic_name):
    from nemesis.roles import resolve_role
    kafka = kafka_cluster.kafka
    kafka.create_topic(topic_name, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    for p in range(P):
        produce(kafka.bootstrap(), topic_name, list(range(p * 10, p * 10 + 10)), partition=p)
    group = f"sg-{topic_name}"
    assert _accept_everything(kafka.bootstrap(), topic_name, group, 10 * P) == 10 * P
    for p in range(P):
        nodes, details = resolve_role(kafka, "share-coordinator",
                                      {"share_group": group, "topic": topic_name, "partition_index": p},
                                      random.Random())
        assert details["share_partition"] == p and nodes == [details["coordinator"]], details
        state_dir = f"{DATA_DIR}/__share_group_state-{details['partition']}"
        out = kafka.node(nodes[0]).run(["sh", "-c", f"cat {state_dir}/*.log | wc -c"]).out
        assert int(out) > 0, f"Kafka wrote nothing to {state_dir}: the target computed the wrong partition"
        # Kafka's own decoder reads that state back (harness/record_collector.py keeps it per run)
        recs = read_share_state(kafka.node(nodes[0])).get(details["partition"], [])
        mine = [r for r in recs if isinstance(r["key"], dict) and r["key"]["data"].get("groupId") == group
                and r["key"]["data"].get("partition") == p]
        assert mine and all(r["value"] is None or "startOffset" in r["value"]["data"] for r in mine), recs[:3]
