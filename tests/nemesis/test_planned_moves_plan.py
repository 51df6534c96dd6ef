"""Planned leader moves (nemesis.operations): what they ask Kafka for, how they
are planned and refused, and what they record. No Kafka: a fake cluster."""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from broker.cluster import PartitionState
from history.fault_intervals import fault_boundary, fault_intervals, nemesis_ops
from nemesis import operations as O
from nemesis import packages as P
from nemesis.protocol import NemesisContext
from tests.harness.config_refusals import refused_by_cli, refused_by_validate


def test_preferred_order_puts_an_in_sync_follower_first():
    assert O.preferred_order([1, 2, 3], 1, [1, 2, 3]) == [2, 1, 3]
    assert O.preferred_order([1, 2, 3], 1, [1, 3]) == [3, 1, 2]
    assert O.preferred_order([2, 1, 3], 1, [1, 2, 3]) == [2, 1, 3]  # the election alone moves it
    assert O.preferred_order([1, 2, 3], 1, [1]) == [1, 2, 3]        # no follower in sync: nothing to elect


def test_moved_replicas_drop_the_leader_and_keep_the_factor_when_a_broker_is_spare():
    assert O.moved_replicas([1, 2, 3], 1, [1, 2, 3], [1, 2, 3]) == [2, 3]
    assert O.moved_replicas([1, 2, 3], 2, [1, 2], [1, 2, 3, 4]) == [1, 3, 4]


def test_reassignment_json_and_tool_answer():
    doc = json.loads(O.reassignment_json("t", {0: [2, 3]}))
    assert doc == {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3]}]}
    out = ("Current partition replica assignment\n\n{\"version\":1}\n\nSave this to use as the "
           "--reassignment-json-file option during rollback\nSuccessfully started partition reassignment for t-0\n")
    assert O.tool_answer(out) == "Successfully started partition reassignment for t-0"
    assert O.tool_answer("") == "no output"


def test_package_is_chosen_by_name_only_and_plans_leader_moves():
    assert "planned-moves" not in [p.name for p in P.build_packages(["all"])]
    pkg, = P.build_packages(["planned-moves"])
    timeline = P.plan([pkg], 600, 10, random.Random(3))
    starts = [op for _, op in timeline if op["f"] in O.MOVES]
    assert {op["f"] for op in starts} == set(O.MOVES)
    assert all(op["value"]["target"] == "leader" and op["value"]["fault"] == "planned-moves" for op in starts)
    assert sum(op["f"] == O.END_MOVE for _, op in timeline) == len(starts)
    assert P.final_ops([pkg]) == [{"f": O.END_MOVE, "value": {"fault": "planned-moves", "target": "all"}}]


def test_planned_moves_run_beside_kill_and_partition():
    P.nemeses_of(P.build_packages(["planned-moves,kill,partition"]))


BASE = """
nodes = 3
time_limit = 20
[workload]
partitions = 1
replication_factor = {rf}
[topic]
"min.insync.replicas" = 1
[nemesis]
faults = ["planned-moves"]
"""


def test_one_replica_is_refused(tmp_path):
    line = refused_by_validate(tmp_path, BASE.format(rf=1))
    assert "planned-moves" in line and "replication factor 1" in line
    assert "replication factor 1" in refused_by_cli(tmp_path, BASE.format(rf=1))


def test_a_step_aimed_elsewhere_than_the_leader_is_refused(tmp_path):
    toml = BASE.format(rf=3) + '[[nemesis.steps]]\nat = 1\nf = "controlled-shutdown"\nvalue = {target = "all"}\n'
    assert "acts on a partition's leader" in refused_by_validate(tmp_path, toml)


# -- the nemesis on a fake cluster -------------------------------------------------
class FakeBroker:
    def __init__(self, name):
        self.name, self.running, self.signals = name, True, []

    def is_running(self):
        return self.running

    def signal(self, sig):
        self.signals.append(sig)
        if sig in ("TERM", "KILL"):
            self.running = False
        return True

    def kill(self):
        self.running = False


class FakeNode:
    def __init__(self, name, cluster):
        self.name, self.address, self.cluster = name, f"10.0.0.{name[1:]}", cluster

    def run(self, argv, stdin=None, check=True, timeout=None):
        if stdin is not None:
            self.cluster.files.append(json.loads(stdin))
            return SimpleNamespace(exit=0, out="", err="")
        mode = argv[-1]
        self.cluster.tool.append(mode)
        if mode == "--execute":
            replicas = self.cluster.files[-1]["partitions"][0]["replicas"]
            leader = self.cluster.state.leader
            self.cluster.state = PartitionState(0, leader if leader in replicas else replicas[0],
                                                tuple(replicas), tuple(replicas))
            return SimpleNamespace(exit=0, out="Successfully started partition reassignment for t-0", err="")
        return SimpleNamespace(exit=0, out="Successfully cancelled partition reassignment for t-0", err="")


class FakeCluster:
    def __init__(self):
        self.files, self.tool, self.restarted = [], [], []
        self.nodes = [FakeNode(f"n{i}", self) for i in (1, 2, 3)]
        self.broker_nodes = self.nodes
        self.brokers = {n.name: FakeBroker(n.name) for n in self.nodes}
        self.state = PartitionState(0, 1, (1, 2, 3), (1, 2, 3))

    def node(self, name):
        return next(n for n in self.nodes if n.name == name)

    def active_controller(self):
        return None

    def partition_states(self, topic):
        return [self.state]

    def restart(self, name, timeout_s):
        self.restarted.append(name)
        self.brokers[name].running = True


@pytest.fixture
def nemesis(monkeypatch):
    cluster = FakeCluster()

    def elect(ctx, topic, p):  # Kafka elects the first replica
        cluster.state = PartitionState(0, cluster.state.replicas[0], cluster.state.isr, cluster.state.replicas)
        return None

    monkeypatch.setattr(O, "elect_preferred", elect)
    monkeypatch.setattr(O, "NEW_LEADER_WAIT_S", 0.0)
    monkeypatch.setattr(O.time, "sleep", lambda s: None)
    nem = O.PlannedMovesNemesis()
    nem.setup(NemesisContext(cluster, "t", random.Random(0)))
    return nem, cluster


def test_preferred_election_reorders_then_elects(nemesis):
    nem, cluster = nemesis
    done = nem.invoke({"f": O.ELECT_PREFERRED, "value": {"fault": "planned-moves", "target": "leader",
                                                         "partition": 0}})
    v = done["value"]
    assert (v["replicas_before"], v["replicas"], v["leader"], v["new_leader"]) == ([1, 2, 3], [2, 1, 3], "n1", "n2")
    assert v["election"] is None and v["reorder"].startswith("exit 0 on n1: Successfully started")
    assert fault_boundary(done["f"], v) == ("start", "planned-moves")


def test_reassignment_moves_the_leader_off_and_end_move_cancels_and_restores(nemesis):
    nem, cluster = nemesis
    done = nem.invoke({"f": O.REASSIGN, "value": {"fault": "planned-moves", "target": "leader", "partition": 0}})
    assert (done["value"]["replicas"], done["value"]["new_leader"]) == ([2, 3], "n2")
    end = nem.invoke({"f": O.END_MOVE, "value": {"fault": "planned-moves"}})
    assert cluster.tool == ["--execute", "--cancel", "--execute"]
    assert cluster.files[-1]["partitions"][0]["replicas"] == [1, 2, 3]
    assert end["value"]["restore"]["0"].startswith("exit 0") and "error" not in end
    assert fault_boundary(end["f"], end["value"]) == ("stop", "planned-moves")
    assert end["value"]["nodes"] == ["n1"]  # the moved leader: the end closes the move's interval
    intervals = fault_intervals(nemesis_ops([
        {"process": "nemesis", "type": t, "f": o["f"], "time": i, "value": o["value"]}
        for i, (o, t) in enumerate([(done, "invoke"), (done, "info"), (end, "invoke"), (end, "info")])]))
    assert len(intervals) == 1 and intervals[0].end is not None


def test_controlled_shutdown_terms_the_leader_and_end_move_restarts_it(nemesis):
    nem, cluster = nemesis
    done = nem.invoke({"f": O.CONTROLLED_SHUTDOWN, "value": {"fault": "planned-moves", "target": "leader",
                                                             "partition": 0}})
    assert cluster.brokers["n1"].signals == ["CONT", "TERM"]
    assert done["value"]["forced"] is False and done["value"]["nodes"] == ["n1"]
    end = nem.invoke({"f": O.END_MOVE, "value": {"fault": "planned-moves"}})
    assert cluster.restarted == ["n1"] and end["value"]["restarted"] == ["n1"]
