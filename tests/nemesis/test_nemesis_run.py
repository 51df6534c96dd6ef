"""A whole run under every fault package ends with every fault healed."""
from __future__ import annotations

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def test_run_with_all_faults_heals_everything(tmp_path):
    from harness.run_cluster import cluster_down
    from harness.run_config import RunConfig, validate
    from harness.runner import Runner
    from nemesis.clock import read_offset
    from nemesis.netem import qdiscs
    from nemesis.partition import chain_rules
    cfg = RunConfig(name="allfaults", seed=4242, time_limit=40, rate=100, store=str(tmp_path), keep_cluster=True)
    cfg.nemesis.faults = ["all"]
    cfg.nemesis.interval = 4
    # Every kind, overlapping: a budget of the whole cluster and no recovery windows.
    cfg.nemesis.budget, cfg.nemesis.recovery_window = 3, 0.0
    # 40 s of this seed's plan already holds every kind (harness/schedule.fault_plan; asserted below).
    run = Runner(validate(cfg))
    try:
        outcome = run.execute()
        assert outcome.exit_code in (0, 1, 2), "the run itself must not fail"
        ops = list(read_history(outcome.run_dir / "history.jsonl"))
        kinds = {(o.get("value") or {}).get("fault") for o in ops if o["process"] == "nemesis"}
        assert {"partition", "kill", "pause", "clock", "netem"} <= kinds, kinds
        for node in run.cluster.nodes:
            assert chain_rules(node) is None, f"{node.name}: chain left"
            assert qdiscs(node) == [], f"{node.name}: netem qdisc left"
            assert read_offset(node) == "+0s", f"{node.name}: clock skewed"
            state = run.cluster.kafka.brokers[node.name].process_state()
            assert state in ("S", "R"), f"{node.name}: broker {state}"
    finally:
        if run.cluster is not None:
            cluster_down(run.cluster.name)
