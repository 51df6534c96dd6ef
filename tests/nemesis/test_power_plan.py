"""The power-loss fault's packages, plans, targets and CLI input checks: no Kafka."""
from __future__ import annotations

import random

import pytest

from infra.errors import UsageError
from nemesis import packages as P
from nemesis import power


def test_power_loss_is_chosen_by_name_only():
    assert "power-loss" not in [p.name for p in P.build_packages(["all"])]
    for name in ("power-loss", "power-loss-all", "power-loss-elr"):
        assert [p.name for p in P.build_packages([name])] == [name]


def test_power_loss_plan_alternates_loss_and_power_on():
    plan = P.plan(P.build_packages(["power-loss"]), 120, 10, random.Random(3))
    fs = [op["f"] for _, op in plan]
    assert fs and fs[0] == power.POWER_LOSS and fs[-1] == power.POWER_ON
    assert all(a != b for a, b in zip(fs, fs[1:])), fs  # never two losses without a power-on between
    for _, op in plan:
        assert op["value"]["fault"] == power.FAULT
    assert P.final_ops(P.build_packages(["kill", "power-loss"]))[-1] == \
        {"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}}


def test_power_loss_all_scenario_hits_every_node_then_powers_on():
    plan = P.plan(P.build_packages(["power-loss-all"]), 60, 20, random.Random(1))
    assert [(op["f"], op["value"].get("target")) for _, op in plan] == [
        (power.POWER_LOSS, "all"), (power.POWER_ON, "all")]
    assert plan[1][0] - plan[0][0] == pytest.approx(5.0)


def test_power_loss_elr_scenario_loses_the_leader_twice_in_turn():
    plan = P.plan(P.build_packages(["power-loss-elr"]), 60, 10, random.Random(1))
    assert [op["f"] for _, op in plan][:4] == [power.POWER_LOSS, "await-new-leader", power.POWER_LOSS, power.POWER_ON]
    k = plan[0][1]["value"]["partition_index"]
    assert plan[2][1]["value"] == {**plan[0][1]["value"], "partition_index": k}


def test_build_nemesis_handles_power_ops():
    nem = P.build_packages(["power-loss"])[0].make_nemesis()
    assert nem.fs == {power.POWER_LOSS, power.POWER_ON}


def test_config_refuses_power_loss_with_moved_log_dirs():
    from harness.run_config import RunConfig, validate
    cfg = RunConfig()
    cfg.nemesis.faults = ["power-loss"]
    cfg.broker = {"log.dirs": "/elsewhere"}
    with pytest.raises(UsageError, match="log.dirs"):
        validate(cfg)
    cfg.nemesis.faults = ["kill"]
    validate(cfg)  # other faults do not care where the logs are


@pytest.mark.parametrize("argv, message", [
    (["power-loss", "n1,bogus"], "unknown power-loss target"),
    (["power-loss", "everyone"], "unknown power-loss target"),
    (["power-loss", "leader"], "needs --topic"),
])
def test_power_loss_cli_bad_input_exits_64(argv, message, capsys):
    from harness.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["nemesis", *argv, "--name", "no-such-cluster-for-tests"])
    assert exc.value.code == 64
    err = capsys.readouterr().err.strip()
    assert err.startswith("kchaos:") and len(err.splitlines()) == 1 and message in err, err


def test_a_node_without_kchaos_log_dir_is_refused_before_any_is_hit(tmp_path):
    """This host has no broker log dir at /var/lib/kafka/data: power loss
    cannot run on it, and says so in one UsageError naming the node."""
    from infra.node import LocalNode

    class Nodes:  # the one KafkaCluster method preflight uses
        def node(self, name):
            return LocalNode(name=name)

    with pytest.raises(UsageError, match=r"power-loss cannot run on a, b: .*log dir"):
        power.preflight(Nodes(), ["a", "b"])


def test_took_line_names_records_and_dropped_ranges():
    cut = {"records": 20, "bytes": 900, "logs": {"kchaos-1": {"from": 0, "to": 3, "records": 3},
                                                 "kchaos-0": {"from": 163, "to": 180, "records": 17}}}
    assert power.summary(cut) == "20 records: kchaos-0 [163,180) kchaos-1 [0,3)"
    assert power.summary({"records": 0, "bytes": 12, "logs": {"x-0": {"from": 5, "to": 5, "records": 0}}}) == \
        "0 records, 12 bytes"  # a torn tail only
    assert power.summary({"records": 0, "logs": {}}).startswith("nothing")
