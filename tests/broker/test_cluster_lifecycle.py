"""A real 3-node KRaft cluster: data survives a leader kill; pause and stop are visible."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from broker.cluster import TopicError, _transient
from tests.kafka_io import produce, read_all

pytestmark = pytest.mark.cluster


def wait_for(predicate, timeout_s: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def test_acknowledged_messages_survive_a_leader_kill(heal_cluster, topic_name):
    kafka = heal_cluster.kafka
    kafka.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    acked = produce(kafka.bootstrap(), topic_name, list(range(1000)), partition=0)
    assert len(acked) == 1000
    assert sorted(read_all(kafka.bootstrap(), topic_name, 1)[0].values()) == list(range(1000))

    old_leader = kafka.leaders(topic_name)[0]
    assert kafka.broker(old_leader).kill()
    assert kafka.broker(old_leader).pid() is None
    new_leader = wait_for(lambda: (l := kafka.leaders(topic_name)[0]) not in (None, old_leader) and l,
                          60, "a new leader")
    assert new_leader != old_leader
    wait_for(lambda: old_leader not in kafka.isr(topic_name)[0], 60, "ISR to drop the killed broker")

    acked += produce(kafka.bootstrap(), topic_name, list(range(1000, 1500)), partition=0)
    assert len(acked) == 1500

    kafka.restart(f"n{old_leader}")
    wait_for(lambda: old_leader in kafka.isr(topic_name)[0], 90, "the restarted broker back in the ISR")

    read = read_all(kafka.bootstrap(), topic_name, 1)[0]
    for partition, offset, value in acked:
        assert read.get(offset) == value, f"acknowledged value {value} at offset {offset} lost"


def test_pause_and_resume_are_visible(heal_cluster, topic_name):
    kafka = heal_cluster.kafka
    kafka.create_topic(topic_name, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    leader = kafka.leaders(topic_name)[0]
    broker = kafka.broker(leader)
    assert broker.pause()
    assert broker.process_state() == "T"
    # The controller fences a broker whose heartbeats stop, and moves leadership away.
    wait_for(lambda: kafka.leaders(topic_name)[0] not in (None, leader), 60, "leadership to leave the paused broker")
    assert broker.resume()
    assert broker.process_state() in ("S", "R")
    wait_for(lambda: leader in kafka.isr(topic_name)[0], 90, "the resumed broker back in the ISR")


def test_stop_and_start_are_visible(heal_cluster):
    kafka = heal_cluster.kafka
    name = kafka.nodes[-1].name
    broker = kafka.brokers[name]
    broker.stop()
    assert broker.pid() is None and not broker.is_running()
    gone = int(name[1:])
    wait_for(lambda: gone not in kafka.live_broker_ids(), 60, "the stopped broker to leave the metadata")
    kafka.restart(name)
    assert broker.is_running()
    wait_for(lambda: gone in kafka.live_broker_ids(), 60, "the restarted broker to register")


def test_active_controller_is_a_running_voter(kafka_cluster):
    controller = kafka_cluster.kafka.active_controller()
    assert controller in (1, 2, 3)
    assert kafka_cluster.kafka.broker(controller).is_running()


def test_logs_and_config_are_collected(kafka_cluster, tmp_path):
    kafka_cluster.kafka.collect_logs(tmp_path)
    for node in kafka_cluster.nodes:
        files = {p.name for p in (tmp_path / node.name).iterdir()}
        assert {"server.log", "server.properties", "kafka.out"} <= files
        props = (tmp_path / node.name / "server.properties").read_text()
        assert f"node.id={node.name[1:]}" in props and "process.roles=broker,controller" in props


def test_creating_a_topic_again_is_done_and_a_bad_config_fails_at_once(kafka_cluster, topic_name, caplog):
    kafka = kafka_cluster.kafka
    kafka.create_topic(topic_name, partitions=1, replication_factor=3)
    kafka.create_topic(topic_name, partitions=1, replication_factor=3)  # TOPIC_ALREADY_EXISTS: done
    assert len(kafka.partition_states(topic_name)) == 1
    caplog.set_level("INFO", logger="broker.cluster")
    with pytest.raises(TopicError, match="min.insync.replicas"):
        kafka.create_topic(topic_name + "-bad", partitions=1, replication_factor=3,
                           config={"min.insync.replicas": "many"})
    assert not [r for r in caplog.records if "retrying" in r.getMessage()], "a rejected config was retried"


def test_only_client_side_and_retriable_errors_are_transient():
    assert _transient(KafkaException(KafkaError(KafkaError._DESTROY_BROKER)))
    assert _transient(KafkaException(KafkaError(KafkaError.NOT_CONTROLLER, retriable=True)))
    assert not _transient(KafkaException(KafkaError(KafkaError.INVALID_REPLICATION_FACTOR)))
    assert not _transient(ValueError("not a Kafka error"))
