"""KIP-966 on default, safe settings: killing a leader whose ISR is itself
alone makes the controller elect an Eligible Leader Replica, and no
acknowledged write is lost."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _controller_logs(run_dir: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text(errors="replace")
            for p in sorted((run_dir / "nodes").glob("*/server.log*"))}


def _election_lines(logs: dict[str, str]) -> str:
    keys = ("Setting new leader", "using ELR", "PartitionChangeBuilder", "Unclean", "elr=[")
    lines = [f"{node}: {line}" for node, text in logs.items() for line in text.splitlines()
             if any(k in line for k in keys)]
    return "\n".join(lines[-40:]) or "(no election lines in any node's server.log)"


def test_elr_election_scenario_elects_an_eligible_leader_replica_and_stays_valid(tmp_path):
    from harness.run_config import load, validate
    from harness.runner import Runner
    cfg = load(EXAMPLES / "elr-election.toml")
    # One cycle, however long its steps wait (the ISR shrinks 10-40 s after the
    # cut): every planned step runs (harness/fault_pacing.py), and the time limit
    # only sets the plan's tail after its last step (planned at 11.5 s), here 13.5 s.
    cfg.time_limit = 25
    cfg.store = str(tmp_path)
    cfg.seed = 7
    assert cfg.topic.get("min.insync.replicas") == 2
    assert not cfg.topic.get("unclean.leader.election.enable")
    assert not cfg.broker.get("unclean.leader.election.enable")
    assert not cfg.broker_features, "ELR must stay on (the default)"
    assert cfg.producer["acks"] == "all" and cfg.producer["enable.idempotence"] is True
    outcome = Runner(validate(cfg)).execute()
    run_dir = outcome.run_dir

    # (a) the active controller logged an ELR election (whichever node it was)
    logs = _controller_logs(run_dir)
    nemesis = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()[1:]
               if '"nemesis"' in line]
    steps = [(op["f"], op["value"].get("elr"), op["value"].get("leader")) for op in nemesis if op["type"] == "info"]
    assert any(f == "kill" for f, _, _ in steps), f"the cycle never reached its kill: {steps}"
    assert any("using ELR" in text for text in logs.values()), \
        f"no controller logged 'using ELR'; election lines:\n{_election_lines(logs)}"

    # (b) a valid verdict
    results = json.loads((run_dir / "results.json").read_text())
    assert outcome.exit_code == 0 and results["valid"] is True, \
        f"exit {outcome.exit_code}, valid={results.get('valid')}, anomalies: " \
        f"{ {k: v.get('count') for k, v in results.get('anomalies', {}).items()} }"

    # (c) results.json names that election as an ELR election, and no unclean one
    record = results.get("elections")
    assert record is not None, "results.json has no 'elections' (controller metadata-log elections)"
    assert record["source"] == "metadata-log", record
    assert any(e["kind"] == "elr" for e in record["elections"]), \
        f"no election of kind 'elr' in results.json: {record['elections']}"
    assert results["anomalies"]["elr-election"]["count"] >= 1
    assert results["anomalies"]["elr-election"]["allowed"] is True
    assert results["anomalies"]["unclean-election"]["count"] == 0
