"""The planned-moves ops on a real cluster: each move hands leadership to another
broker, each end-move undoes it, and on safe settings (acks=all) the run stays
valid (docs/design.md, "Planned operations")."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# One of each move, each undone before the next, on partition 0.
STEPS = [(0.5, "elect-preferred"), (3.0, "end-move"), (4.0, "reassign-partition"), (7.0, "end-move"),
         (8.0, "controlled-shutdown"), (12.0, "end-move")]


def test_planned_moves_run_heal_and_stay_valid_with_acks_all(tmp_path):
    from harness.run_cluster import cluster_down
    from harness.run_config import load, validate
    from harness.client_config import TOPIC
    from harness.runner import Runner
    cfg = load(EXAMPLES / "planned-moves.toml")
    cfg.time_limit, cfg.store, cfg.seed, cfg.keep_cluster = 15, str(tmp_path), 31, True
    # Paced batch sends, not the example's unpaced pipelined ones: hundreds of thousands of
    # messages in 15 s took minutes to read back from the replicas, and the moves are the point.
    cfg.workload.producer, cfg.workload.in_flight, cfg.concurrency = "batch", 1, 4
    cfg.nemesis.steps = [{"at": at, "f": f, "value": {"fault": "planned-moves", "target": "leader", "partition": 0}
                          if f != "end-move" else {"fault": "planned-moves"}} for at, f in STEPS]
    assert cfg.producer["acks"] == "all"
    run = Runner(validate(cfg))
    try:
        outcome = run.execute()
        ops = [o for o in read_history(outcome.run_dir / "history.jsonl")
               if o["process"] == "nemesis" and o["type"] == "info"]
        moves = {o["f"]: o for o in ops if o["f"] != "end-move"}
        assert set(moves) == {"elect-preferred", "reassign-partition", "controlled-shutdown"}, [o["f"] for o in ops]
        for f, o in moves.items():
            v = o["value"]
            assert "error" not in o, (f, o.get("error"))
            assert v["new_leader"] not in (None, v["leader"]), (f, v)
        assert moves["elect-preferred"]["value"]["election"] is None, moves["elect-preferred"]["value"]
        assert "Successfully started" in moves["reassign-partition"]["value"]["reassign"]
        assert moves["controlled-shutdown"]["value"]["forced"] is False
        ends = [o for o in ops if o["f"] == "end-move"]
        assert ends and all("error" not in o for o in ends), [o.get("error") for o in ends]

        kafka = run.cluster.kafka
        assert all(b.is_running() for b in kafka.brokers.values())
        state = next(s for s in kafka.partition_states(TOPIC) if s.partition == 0)
        assert sorted(state.replicas) == [1, 2, 3], state

        results = json.loads((outcome.run_dir / "results.json").read_text())
        assert outcome.exit_code == 0 and results["valid"] is True, \
            f"exit {outcome.exit_code}, anomalies: { {k: v.get('count') for k, v in results.get('anomalies', {}).items()} }"
    finally:
        if run.cluster is not None:
            cluster_down(run.cluster.name)
