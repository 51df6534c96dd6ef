"""The rolling upgrade's pure parts: what counts as an upgrade, the order and
plan of a roll, kafka-features' answers read and asked (nemesis/upgrade.py)."""
from __future__ import annotations

import random

import pytest

from harness.run_config import RunConfig
from harness.schedule import fault_plan
from nemesis.packages import build_packages, nemeses_of
from nemesis.upgrade import (END_UPGRADE, FINALIZE_UPGRADE, RESTART_UPGRADED, UPGRADE_NODE, RollingUpgradePackage,
                             UpgradeNemesis, bind_upgrade, feature_command, metadata_release, parse_features,
                             roll_order, rolling_plan, upgrade_problem)

DESCRIBE = ("Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
            "FinalizedVersionLevel: 0\tEpoch: 17\n"
            "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\t"
            "Epoch: 17\n"
            "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
            "FinalizedVersionLevel: 3.9-IV0\tEpoch: 17\n")


@pytest.mark.parametrize("current, target, needle", [
    ("3.9.2", "4.3.1", None),
    ("4.0.1", "4.3.1", None),
    ("4.3.1", "4.3.1", "is the version the cluster starts with"),
    ("4.3.1", "3.9.2", "older than kafka_version 4.3.1"),
    ("3.2.3", "4.3.1", "from 3.3 on"),
    ("3.9.2", "four", "not a Kafka version"),
])
def test_what_counts_as_an_upgrade(current, target, needle):
    problem = upgrade_problem(current, target)
    assert (problem is None) if needle is None else (needle in problem and "\n" not in problem)


def test_metadata_release_is_major_dot_minor():
    assert metadata_release("4.3.1") == "4.3" and metadata_release("3.9.2-rc1") == "3.9"


def test_controllers_roll_first():
    assert roll_order(3, 0) == ["n1", "n2", "n3"]
    assert roll_order(3, 3) == ["n4", "n5", "n6", "n1", "n2", "n3"]


def test_a_roll_takes_every_node_once_then_finalizes():
    steps = rolling_plan("4.3.1", 3, 0, 10.0, random.Random(7))
    fs = [op["f"] for _, op in steps]
    assert fs == [UPGRADE_NODE, RESTART_UPGRADED] * 3 + [FINALIZE_UPGRADE]
    assert [op["value"]["node"] for _, op in steps if op["f"] == UPGRADE_NODE] == ["n1", "n2", "n3"]
    assert all(op["value"]["version"] == "4.3.1" for _, op in steps if op["f"] in (UPGRADE_NODE, FINALIZE_UPGRADE))
    times = [t for t, _ in steps]
    assert times == sorted(times) and times[0] > 0
    # each restart follows its node's stop at once: the node is down only for the switch
    assert all(b - a < 0.5 for (a, x), (b, y) in zip(steps, steps[1:]) if x["f"] == UPGRADE_NODE)


def test_bind_upgrade_sets_the_version_and_leaves_other_packages():
    pkg = build_packages(["rolling-upgrade"])[0]
    bound = bind_upgrade(pkg, "4.3.1", 3, 3)
    assert isinstance(bound, RollingUpgradePackage) and bound.version == "4.3.1" and bound.controllers == 3
    kill = build_packages(["kill"])[0]
    assert bind_upgrade(kill, "4.3.1", 3, 0) is kill and bind_upgrade(pkg, None, 3, 0) is pkg
    assert bound.final_ops() == [{"f": END_UPGRADE, "value": {"fault": "rolling-upgrade", "target": "all"}}]


def test_the_runs_plan_carries_upgrade_to():
    cfg = RunConfig(seed=5, time_limit=90.0, kafka_version="3.9.2", upgrade_to="4.3.1")
    cfg.nemesis.faults = ["rolling-upgrade"]
    steps = fault_plan(cfg)
    assert [op["value"].get("version") for _, op in steps if op["f"] == FINALIZE_UPGRADE] == ["4.3.1"]
    assert len([1 for _, op in steps if op["f"] == UPGRADE_NODE]) == 3


def test_the_package_mixes_with_the_other_operations():
    nems = nemeses_of(build_packages(["rolling-upgrade,planned-moves,kill"]))
    assert any(isinstance(n, UpgradeNemesis) for n in nems)


PADDED = ("Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          "
          "SupportedMaxVersion: 4.3-IV0          FinalizedVersionLevel: 4.3-IV0          Epoch: 88\n")


def test_feature_levels_read_from_describe():
    assert parse_features(PADDED) == {"metadata.version": {"min": "3.3-IV3", "max": "4.3-IV0",
                                                           "finalized": "4.3-IV0", "epoch": 88}}
    levels = parse_features(DESCRIBE + "some other line\n")
    assert levels["metadata.version"] == {"min": "3.3-IV3", "max": "4.3-IV0", "finalized": "3.9-IV0", "epoch": 17}
    assert levels["kraft.version"]["finalized"] == 0 and set(levels) == {
        "eligible.leader.replicas.version", "kraft.version", "metadata.version"}


@pytest.mark.parametrize("feature, level, finalized, args", [
    ("transaction.version", 2, 0, ["upgrade", "--feature", "transaction.version=2"]),
    ("group.version", 1, None, ["upgrade", "--feature", "group.version=1"]),
    ("transaction.version", 1, 2, ["downgrade", "--feature", "transaction.version=1"]),
    ("eligible.leader.replicas.version", 0, 1, ["disable", "--feature", "eligible.leader.replicas.version"]),
])
def test_feature_commands(feature, level, finalized, args):
    assert feature_command(feature, level, finalized) == args


@pytest.mark.parametrize("feature, level", [("kraft.version", 1), ("metadata.version", 20),
                                            ("group.version", -1), ("group.version", "1")])
def test_feature_commands_refused(feature, level):
    with pytest.raises(ValueError):
        feature_command(feature, level, 0)
