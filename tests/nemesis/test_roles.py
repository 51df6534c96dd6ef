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
