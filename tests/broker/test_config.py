"""server.properties rendering and cluster ids (pure)."""
import random

from broker.config import broker_id, new_cluster_id, render_properties

VOTERS = [("n1", "10.0.0.11"), ("n2", "10.0.0.12"), ("n3", "10.0.0.13")]


def test_cluster_ids_never_start_with_a_dash():
    rng = random.Random(0)
    ids = [new_cluster_id(rng) for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)


def test_static_voters_combined_mode_and_addresses():
    props = dict(line.split("=", 1) for line in render_properties("n2", "10.0.0.12", VOTERS).splitlines()
                 if "=" in line)
    assert props["node.id"] == "2" and props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@10.0.0.11:9093,2@10.0.0.12:9093,3@10.0.0.13:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://10.0.0.12:9092"
    assert props["unclean.leader.election.enable"] == "false"


def test_overrides_win_and_booleans_render_as_kafka_expects():
    text = render_properties("n1", "10.0.0.11", VOTERS, {"unclean.leader.election.enable": True,
                                                         "replica.lag.time.max.ms": 10000})
    assert "unclean.leader.election.enable=true" in text and "replica.lag.time.max.ms=10000" in text
    assert broker_id("n7") == 7
