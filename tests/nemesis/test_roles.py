"""Role fault targets and the two-quorum fault budget (pure)."""
from __future__ import annotations

import random

import pytest

from broker.cluster import KafkaCluster
from infra.errors import UsageError
from nemesis.budget import Budget, fits, op_cost, op_costs
from nemesis.packages import PACKAGES, build_packages, plan
from nemesis.roles import aim, check_targets, resolve_role, with_targets


class FakeNode:
    def __init__(self, name: str):
        self.name, self.address = name, f"10.0.0.{10 + int(name[1:])}"


class Isolated(KafkaCluster):
    def active_controller(self):
        return 5


ISOLATED = Isolated([FakeNode(f"n{i}") for i in range(1, 7)], controllers=["n4", "n5", "n6"])
COMBINED = KafkaCluster([FakeNode(f"n{i}") for i in range(1, 4)])


def test_role_targets_resolve_within_their_role():
    rng = random.Random(1)
    assert resolve_role(ISOLATED, "active-controller", {}, rng)[0] == ["n5"]
    assert {resolve_role(ISOLATED, "controllers", {"node_index": i}, rng)[0][0] for i in range(6)} == {"n4", "n5", "n6"}
    assert {resolve_role(ISOLATED, "brokers", {}, rng)[0][0] for _ in range(30)} == {"n1", "n2", "n3"}
    with pytest.raises(UsageError, match="controllers = 3"):
        resolve_role(COMBINED, "controllers", {}, rng)


def test_targets_a_layout_lacks_are_refused():
    check_targets(["controllers", "active-controller", "brokers"], 3)
    check_targets(["active-controller"], 0)
    with pytest.raises(UsageError, match="combined"):
        check_targets(["controllers"], 0)
    with pytest.raises(UsageError, match="combined"):
        check_targets([], 0, [{"at": 1, "f": "kill", "value": {"target": "brokers"}}])
    with pytest.raises(UsageError, match="valid targets"):
        check_targets(["leaders"], 3)


def test_aimed_starts_name_a_role_and_partitions_isolate_it():
    rng = random.Random(2)
    kill = aim({"f": "kill", "value": {"fault": "kill", "target": "leader", "partition_index": 7}},
               ["active-controller"], rng)
    assert kill["value"]["target"] == "active-controller" and "partition_index" not in kill["value"]
    cut = aim({"f": "start-partition", "value": {"fault": "partition", "topology": "halves", "seed": 3}},
              ["controllers"], rng)
    assert cut["value"]["topology"] == "isolate-node" and cut["value"]["target"] == "controllers"
    assert "seed" not in cut["value"]
    assert with_targets(PACKAGES["kill"], []) is PACKAGES["kill"]


ISO = Budget(nodes=1, recovery_s=0.0, n=3, controllers=3, controller_nodes=1)


@pytest.mark.parametrize("value, cost", [
    ({"fault": "kill", "target": "active-controller"}, (0, 1)),
    ({"fault": "kill", "target": "controllers"}, (0, 1)),
    ({"fault": "pause", "target": "brokers"}, (1, 0)),
    ({"fault": "kill", "target": "leader"}, (1, 0)),
    ({"fault": "kill", "target": "node", "node_index": 4}, (1, 1)),
    ({"fault": "kill", "target": "all"}, (3, 3)),
    ({"fault": "clock", "target": "all"}, (0, 0)),
    ({"fault": "partition", "topology": "isolate-controller"}, (0, 1)),
    ({"fault": "partition", "topology": "isolate-node", "target": "active-controller"}, (0, 1)),
    ({"fault": "partition", "topology": "client-cut-leader"}, (1, 0)),
])
def test_costs_count_each_quorum(value, cost):
    assert op_costs({"value": value}, ISO) == cost


def test_combined_costs_are_the_old_counts():
    b = Budget(nodes=1, recovery_s=0.0, n=3)
    op = {"value": {"fault": "kill", "target": "minority"}}
    assert op_costs(op, b) == (op_cost(op, 3), 0)
    assert fits(b, [], (1, 0)) and not fits(b, [(1, 0)], (1, 0))


def test_a_controller_fault_and_a_broker_fault_fit_together_two_controller_faults_do_not():
    assert fits(ISO, [(0, 1)], (1, 0))
    assert not fits(ISO, [(0, 1)], (0, 1))


def test_plans_aimed_at_the_controllers_never_hit_two_at_once():
    packages = [with_targets(p, ["controllers", "active-controller"]) for p in build_packages(["kill,pause,partition"])]
    steps = plan(packages, 600, 5, random.Random(7), ISO)
    on = 0
    starts = 0
    for _, op in steps:
        value = op["value"]
        if "target" in value and value.get("target") != "all":
            assert value["target"] in ("controllers", "active-controller")
            on += 1
            starts += 1
        elif value.get("target") == "all" or op["f"] in ("start", "resume", "stop-partition"):
            on = max(0, on - 1)
        assert on <= 1
    assert starts > 10


def test_coordinator_partitions_follow_kafkas_hash():
    from nemesis.roles import coordinator_partition, java_string_hash
    assert java_string_hash("hello") == 99162322 and java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert coordinator_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert coordinator_partition("hello", 50) == 99162322 % 50


class WithCoordinators(Isolated):
    def partition_states(self, topic, admin=None):
        from broker.cluster import PartitionState
        if topic != "__transaction_state":
            return []
        return [PartitionState(p, leader, (1, 2, 3), (1, 2, 3)) for p, leader in enumerate((1, 2, 3))]

    def authoritative_partition_states(self, topic, controller, attempts=2):
        return None


def test_a_coordinator_target_is_the_leader_of_its_ids_partition():
    from nemesis.roles import coordinator_partition
    cluster = WithCoordinators([FakeNode(f"n{i}") for i in range(1, 7)], controllers=["n4", "n5", "n6"])
    nodes, details = resolve_role(cluster, "txn-coordinator", {"transactional_id": "kchaos-7-w1"}, random.Random())
    p = coordinator_partition("kchaos-7-w1", 3)
    assert nodes == [f"n{p + 1}"] and details["partition"] == p
    assert resolve_role(cluster, "group-coordinator", {"group": "g"}, random.Random())[0] == []  # no offsets topic yet
    with pytest.raises(UsageError, match="needs the op's 'group'"):
        resolve_role(cluster, "group-coordinator", {}, random.Random())
    with pytest.raises(UsageError, match="transactions"):
        check_targets(["txn-coordinator"], 0, ids={"group": ["g"]})
    cut = aim({"f": "kill", "value": {"fault": "kill", "target": "leader"}}, ["group-coordinator"], random.Random(),
              {"group": ["kchaos-5"]})
    assert cut["value"]["group"] == "kchaos-5"
    assert op_costs(cut, ISO) == (1, 0)


class WithShareState(Isolated):
    """Three partitions of the run's topic, five of __share_group_state led by n1..n5 in turn."""
    def partition_states(self, topic, admin=None):
        from broker.cluster import PartitionState
        count = {"kchaos": 3, "__share_group_state": 5}.get(topic, 0)
        return [PartitionState(p, p % 5 + 1, (1, 2, 3), (1, 2, 3)) for p in range(count)]

    def authoritative_partition_states(self, topic, controller, attempts=2):
        return None


def test_a_share_coordinator_is_the_leader_of_its_share_partitions_state(monkeypatch):
    import nemesis.roles as roles
    monkeypatch.setattr(roles, "topic_id", lambda cluster, topic: "AAAAAAAAAAAAAAAAAAAwOQ")
    cluster = WithShareState([FakeNode(f"n{i}") for i in range(1, 7)], controllers=["n4", "n5", "n6"])
    value = {"share_group": "kchaos-9", "topic": "kchaos", "partition_index": 7}
    nodes, details = resolve_role(cluster, "share-coordinator", value, random.Random())
    # Kafka's key: "<group>:<topic id, base64>:<partition>"; partition_index 7 of 3 partitions is 1
    p = roles.coordinator_partition("kchaos-9:AAAAAAAAAAAAAAAAAAAwOQ:1", 5)
    assert details["share_partition"] == 1 and details["partition"] == p and nodes == [f"n{p % 5 + 1}"]
    monkeypatch.setattr(roles, "topic_id", lambda cluster, topic: None)  # no broker answered: nothing to hit
    assert resolve_role(cluster, "share-coordinator", value, random.Random())[0] == []
    with pytest.raises(UsageError, match="needs the op's 'topic'"):
        resolve_role(cluster, "share-coordinator", {"share_group": "g"}, random.Random())


def test_share_coordinator_targets_need_a_share_workload_and_draw_a_share_partition():
    with pytest.raises(UsageError, match='a share group \\(mode = "share"\\)'):
        check_targets(["share-coordinator"], 0, ids={"group": ["g"]})
    check_targets(["share-coordinator"], 0, ids={"share_group": ["g"], "topic": ["kchaos"]})
    cut = aim({"f": "start-partition", "value": {"fault": "partition", "topology": "halves"}}, ["share-coordinator"],
              random.Random(3), {"share_group": ["kchaos-5"], "topic": ["kchaos"]})
    value = cut["value"]
    assert value["share_group"] == "kchaos-5" and value["topic"] == "kchaos" and value["topology"] == "isolate-node"
    assert 0 <= value["partition_index"] < 840


def test_a_cut_passes_the_coordinator_keys_on(monkeypatch):
    """A partition's isolated node is resolved from the op's role keys (group, share group, topic ...)."""
    from nemesis import partition
    seen = {}
    monkeypatch.setattr(partition, "resolve_nodes", lambda ctx, spec: (seen.update(spec), (["n2"], {}))[1])
    value = {"fault": "partition", "target": "share-coordinator", "share_group": "g", "topic": "kchaos",
             "partition_index": 4}
    assert partition._one_node(None, value) == ["n2"]
    assert seen["share_group"] == "g" and seen["topic"] == "kchaos" and seen["partition_index"] == 4


def test_the_cli_refuses_a_share_coordinator_target_without_a_share_workload(tmp_path):
    from tests.harness.config_refusals import refused_by_cli
    line = refused_by_cli(tmp_path, '[nemesis]\nfaults = ["kill"]\ntargets = ["share-coordinator"]\n')
    assert "'share-coordinator' needs a workload with a share group" in line


def test_a_share_run_aims_its_faults_at_its_share_groups_coordinator():
    from harness.run_config import from_dict, validate
    from harness.schedule import fault_plan
    cfg = validate(from_dict({"seed": 5, "time_limit": 120, "kafka_version": "4.3.1",
                              "workload": {"mode": "share", "poll_timeout": 0.2, "share_lock_ms": 15000},
                              "nemesis": {"faults": ["kill", "partition"], "interval": 5,
                                          "targets": ["share-coordinator"]}}))
    starts = [op["value"] for _, op in fault_plan(cfg) if op["f"] in ("kill", "start-partition")]
    assert starts and all(v["share_group"] == "kchaos-5" and v["topic"] == "kchaos" for v in starts)


def test_a_topic_id_is_hashed_as_kafka_prints_it():
    """Kafka's Uuid.toString is URL-safe base64 without padding; confluent-kafka
    prints the standard alphabet. The share coordinator's key must use Kafka's
    (a 4.3.1 cluster test aimed at the wrong partition for an id with a "+")."""
    import base64
    import uuid

    from confluent_kafka import Uuid

    from nemesis.roles import kafka_uuid_text
    raw = uuid.UUID("7142fec1-b9e6-4035-b37e-7059666a98ec")   # standard base64 "cUL+wbnmQDWzfnBZZmqY7A"
    signed = [x - (1 << 64) if x >= 1 << 63 else x for x in (raw.int >> 64, raw.int & ((1 << 64) - 1))]
    printed = str(Uuid(*signed))
    assert "+" in printed
    assert kafka_uuid_text(printed) == base64.urlsafe_b64encode(raw.bytes).decode().rstrip("=") \
        == "cUL-wbnmQDWzfnBZZmqY7A"
