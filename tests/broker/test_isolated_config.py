"""Isolated KRaft: broker-only and controller-only server.properties, and the
cluster's view of roles (pure: no node is touched)."""
from __future__ import annotations

import pytest

from broker.cluster import KafkaCluster
from broker.config import render_properties
from infra.errors import UsageError

CONTROLLERS = [("n4", "10.0.0.14"), ("n5", "10.0.0.15"), ("n6", "10.0.0.16")]


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_a_broker_only_node_listens_for_clients_and_knows_the_controllers():
    p = props(render_properties("n1", "10.0.0.11", CONTROLLERS, role="broker", brokers=3))
    assert p["process.roles"] == "broker"
    assert p["listeners"] == "PLAINTEXT://10.0.0.11:9092"
    assert p["controller.quorum.voters"] == "4@10.0.0.14:9093,5@10.0.0.15:9093,6@10.0.0.16:9093"
    assert p["controller.listener.names"] == "CONTROLLER" and p["inter.broker.listener.name"] == "PLAINTEXT"
    assert p["default.replication.factor"] == "3"


def test_a_controller_only_node_listens_for_the_quorum_only():
    p = props(render_properties("n4", "10.0.0.14", CONTROLLERS, role="controller", brokers=1, proxy_port=40000))
    assert p["process.roles"] == "controller" and p["node.id"] == "4"
    assert p["listeners"] == "CONTROLLER://10.0.0.14:9093"
    assert "advertised.listeners" not in p and "inter.broker.listener.name" not in p
    assert p["offsets.topic.replication.factor"] == "1"  # the brokers' count, not the voters'


class FakeNode:
    def __init__(self, name: str):
        self.name, self.address = name, f"10.0.0.{10 + int(name[1:])}"


def test_roles_and_bootstrap_of_an_isolated_cluster():
    kafka = KafkaCluster([FakeNode(f"n{i}") for i in range(1, 7)], controllers=["n4", "n5", "n6"])
    assert kafka.isolated and kafka.role_of("n1") == "broker" and kafka.role_of("n5") == "controller"
    assert [n.name for n in kafka.broker_nodes] == ["n1", "n2", "n3"]
    assert [n.name for n in kafka.controller_nodes] == ["n4", "n5", "n6"]
    assert kafka.bootstrap() == "10.0.0.11:9092,10.0.0.12:9092,10.0.0.13:9092"
    with pytest.raises(UsageError):
        kafka.create_topic("t", 1, 4)  # above the broker count


def test_a_combined_cluster_is_unchanged():
    kafka = KafkaCluster([FakeNode(f"n{i}") for i in range(1, 4)])
    assert not kafka.isolated and kafka.role_of("n2") == "combined"
    assert kafka.broker_nodes == kafka.controller_nodes == kafka.nodes
    with pytest.raises(UsageError):
        KafkaCluster([FakeNode("n1")], controllers=["n9"])
