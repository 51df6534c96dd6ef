"""Reading the ELR from TopicCommand's describe output (Kafka 4.x format)."""
from __future__ import annotations

from nemesis.scenarios import parse_elr

DESCRIBE = (
    "Topic: kchaos\tTopicId: 3dX9\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2\n"
    "\tTopic: kchaos\tPartition: 0\tLeader: 2\tReplicas: 1,2,3\tIsr: 2\tElr: 1,3\tLastKnownElr: \n"
    "\tTopic: kchaos\tPartition: 1\tLeader: 3\tReplicas: 3,1,2\tIsr: 3,1,2\tElr: N/A\tLastKnownElr: N/A\n"
)


def test_elr_and_last_known_elr_of_the_asked_partition() -> None:
    assert parse_elr(DESCRIBE, 0) == ([1, 3], [])
    assert parse_elr(DESCRIBE, 1) == ([], [])


def test_a_partition_not_described_is_none() -> None:
    assert parse_elr(DESCRIBE, 2) is None
    assert parse_elr("Error while executing topic command : Timed out", 0) is None
