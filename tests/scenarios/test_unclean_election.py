"""The product's reason to exist: the classic unclean-election loss, found on real Kafka."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_unclean_election_scenario_is_invalid_with_a_lost_write_acknowledged_before_it(tmp_path):
    from harness.run_config import load, validate
    from harness.runner import Runner
    cfg = load(EXAMPLES / "unclean-election.toml")
    # One cycle: every planned step runs (harness/fault_pacing.py); the time limit
    # only sets the plan's tail after its last step (planned at 13.8 s), here 11 s.
    cfg.time_limit = 25
    cfg.store = str(tmp_path)
    cfg.seed = 5
    outcome = Runner(validate(cfg)).execute()
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert outcome.exit_code == 1 and results["valid"] is False

    elections = results["unclean_elections"]
    assert elections, "the scenario must drive the controller into an unclean election"
    election_time = min(e["time"] for e in elections)

    lost = results["anomalies"]["lost-write"]
    assert lost["count"] > 0 and not lost["allowed"]
    acked_before = [op for w in lost["witnesses"] for op in w["ops"]
                    if op["f"] == "send" and op["type"] == "ok" and op["time"] < election_time]
    assert acked_before, "a lost write acknowledged before the unclean election"
    assert any(e["lost_writes"] > 0 for e in elections), "the loss is attributed to the election"
    # Kafka's own record: the controller's metadata log names the election, with its epoch
    assert results["elections"]["source"] == "metadata-log", results["elections"]["notes"]
    assert all(e["kind"] == "unclean" and isinstance(e["epoch"], int) for e in elections)
    for w in lost["witnesses"]:
        assert w["attribution"] == "epoch" and w["attributed_to"]["epoch"] in {e["epoch"] for e in elections}, w
        # truncated by the old leader when it came back: on no replica any more
        assert w["replicas"] and set(w["replicas"].values()) == {"absent"}, w["replicas"]
    assert results["stats"]["lost_writes_on_replicas"]["absent_everywhere"] == lost["count"]
