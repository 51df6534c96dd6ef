"""Separate controllers and role targets in a run config: refused in one
line, exit 64, before any cluster starts (harness/layout_config.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from harness.run_config import from_dict, validate
from harness.schedule import fault_budget, fault_plan
from nemesis.budget import Budget
from tests.harness.config_refusals import refused_by_cli, refused_by_validate

KILL = '[nemesis]\nfaults = ["kill"]\n'


@pytest.mark.parametrize("toml, needle", [
    ('controllers = 9\n', "controller count must be between 0"),
    ('controllers = true\n', "controllers must be"),
    (KILL + 'targets = ["controllers"]\n', "needs separate controllers"),
    ('controllers = 3\n' + KILL + 'targets = ["leaders"]\n', "unknown nemesis target 'leaders'"),
])
def test_bad_layouts_are_refused(tmp_path, toml, needle):
    assert needle in refused_by_validate(tmp_path, toml)


def test_the_cli_refuses_a_role_target_a_combined_cluster_lacks(tmp_path):
    line = refused_by_cli(tmp_path, KILL + 'targets = ["active-controller", "brokers"]\n')
    assert "'brokers' needs separate controllers" in line


def test_cluster_up_refuses_a_bad_controller_count_before_any_container():
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "up", "--controllers", "8",
                           "--name", "never-made"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64 and "controller count" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_isolated_run_budgets_each_quorum_and_aims_its_faults():
    cfg = validate(from_dict({"seed": 5, "controllers": 3, "time_limit": 120,
                              "nemesis": {"faults": ["kill", "partition"], "interval": 5,
                                          "targets": ["active-controller"]}}))
    assert fault_budget(cfg) == Budget(nodes=1, recovery_s=10.0, n=3, controllers=3, controller_nodes=1)
    starts = [op["value"] for _, op in fault_plan(cfg) if op["f"] in ("kill", "start-partition")]
    assert starts and all(v["target"] == "active-controller" for v in starts)
    assert all(v["topology"] == "isolate-node" for v in starts if v["fault"] == "partition")


def test_a_combined_run_plans_as_before():
    cfg = validate(from_dict({"seed": 5, "nemesis": {"faults": ["kill", "partition"]}}))
    assert fault_budget(cfg) == Budget(nodes=1, recovery_s=10.0, n=3)


def test_coordinator_targets_need_the_workload_that_makes_them(tmp_path):
    assert "consumer group" in refused_by_validate(tmp_path, KILL + 'targets = ["group-coordinator"]\n')
    cfg = validate(from_dict({"seed": 5, "time_limit": 120, "workload": {"transactions": True},
                              "nemesis": {"faults": ["kill"], "interval": 5, "targets": ["txn-coordinator"]}}))
    starts = [op["value"] for _, op in fault_plan(cfg) if op["f"] == "kill"]
    assert starts and all(v["transactional_id"].startswith("kchaos-5-w") for v in starts)
