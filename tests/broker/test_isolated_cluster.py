"""Isolated KRaft on real containers: three controller-only nodes beside three
brokers, one short run whose kills and partitions aim at the active controller
(safe settings: expected valid), then the kept cluster as `kchaos cluster`
sees it. One cluster for the whole file (about a minute and a half)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def test_a_run_killing_and_cutting_the_active_controller_is_valid(tmp_path):
    from harness.run_cluster import cluster_attach, cluster_down
    from harness.run_config import RunConfig, validate
    from harness.runner import Runner
    # Seed 3116 plans one kill and two cuts (harness/schedule.fault_plan): a controller's restart
    # takes about 20 s, so each kill planned costs the suite that much.
    cfg = RunConfig(name="isolated", seed=3116, controllers=3, time_limit=20, rate=100, store=str(tmp_path),
                    keep_cluster=True)
    cfg.nemesis.faults = ["kill", "partition"]
    cfg.nemesis.targets = ["active-controller"]
    cfg.nemesis.interval = 3
    cfg.nemesis.recovery_window = 2.0
    run = Runner(validate(cfg))
    try:
        outcome = run.execute()
        assert outcome.exit_code == 0, f"expected valid, got exit {outcome.exit_code} in {outcome.run_dir}"
        kafka = run.cluster.kafka
        assert [n.name for n in kafka.broker_nodes] == ["n1", "n2", "n3"]
        assert [n.name for n in kafka.controller_nodes] == ["n4", "n5", "n6"]
        starts = [o["value"] for o in read_history(outcome.run_dir / "history.jsonl")
                  if o["process"] == "nemesis" and (o.get("value") or {}).get("action") == "start"]
        hit = {n for v in starts for n in v.get("isolated" if v["fault"] == "partition" else "nodes") or []}
        assert {v["fault"] for v in starts} == {"kill", "partition"}, starts
        assert hit and hit <= {"n4", "n5", "n6"}, starts  # only controllers were ever hit
        header = json.loads((outcome.run_dir / "metadata.jsonl").read_text().splitlines()[0])
        assert {"n4", "n5", "n6"} <= set(header["end_offset_per_node"]), header
        assert not {k: v for k, v in header["errors"].items() if k in ("n4", "n5", "n6")}, header["errors"]
        # separate controllers: the static quorum is described, so its logs are compared below
        # the high watermark (harness/record_collector.quorum_described, checkers/raft_log.py)
        raft = json.loads((outcome.run_dir / "results.json").read_text())["stats"]["raft_log"]
        assert raft["committed_source"].startswith("high watermark") and raft["offsets_compared"] > 0, raft
        logs = outcome.run_dir / "nodes"
        assert "process.roles=controller" in (logs / "n4" / "server.properties").read_text()
        assert "process.roles=broker\n" in (logs / "n1" / "server.properties").read_text()
        assert (logs / "n6" / "server.log").stat().st_size > 0

        # The kept cluster, attached by name: roles from the containers' labels.
        attached = cluster_attach(run.cluster.name).kafka
        assert attached.isolated and attached.bootstrap() == kafka.bootstrap()
        assert attached.active_controller() in (4, 5, 6)
        status = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "status", "--name",
                                 run.cluster.name], capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("controller") >= 3 and "active" in status.stdout
        down = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "down", "--name", run.cluster.name],
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0 and "removed 6 containers" in down.stdout, down.stdout + down.stderr
    finally:
        if run.cluster is not None:
            cluster_down(run.cluster.name)


@pytest.mark.long
def test_kills_of_the_group_coordinator_hit_the_broker_kafka_names(tmp_path):
    """A subscribe run on an isolated cluster whose kills aim at the run's group
    coordinator: valid, every kill on the broker kchaos resolved as the coordinator."""
    from harness.client_config import run_group_id
    from harness.run_cluster import cluster_down
    from harness.run_config import RunConfig, validate
    from harness.runner import Runner
    cfg = RunConfig(name="coordinator", seed=3134, controllers=3, time_limit=20, rate=100, store=str(tmp_path),
                    keep_cluster=True)
    cfg.workload.mode = "subscribe"
    cfg.nemesis.faults = ["kill"]
    cfg.nemesis.targets = ["group-coordinator"]
    cfg.nemesis.interval = 3
    cfg.nemesis.recovery_window = 2.0
    run = Runner(validate(cfg))
    try:
        outcome = run.execute()
        assert outcome.exit_code == 0, f"expected valid, got exit {outcome.exit_code} in {outcome.run_dir}"
        starts = [o["value"] for o in read_history(outcome.run_dir / "history.jsonl")
                  if o["process"] == "nemesis" and (o.get("value") or {}).get("action") == "start"]
        assert starts and all(v["target"] == "group-coordinator" for v in starts), starts
        assert {n for v in starts for n in v["nodes"]} <= {"n1", "n2", "n3"}, starts
        assert all(v["group"] == run_group_id(cfg) and v["coordinator"] == v["nodes"][0] for v in starts), starts
        # Not yet confirmed: the coordinator kchaos finds against Kafka's own DescribeGroups answer
        # (confluent-kafka's describe_consumer_groups timed out after such a run).
    finally:
        if run.cluster is not None:
            cluster_down(run.cluster.name)
