"""A whole fault-free pipelined run with the Java client (client = "java",
producer = "pipelined"): the driver's sends are recorded as the librdkafka
pipelined producer's, and the checkers find the run valid."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from history.ops import read_history

# A whole run with a cluster of its own (about 75 s): behind `long` to keep the suite under
# 40 minutes; the pipelined pump against the shared cluster (test_java_driver_cluster.py)
# covers the driver's pipelined sends in every suite run.
pytestmark = [pytest.mark.cluster, pytest.mark.long]


def test_fault_free_pipelined_java_run_is_valid(tmp_path):
    from harness.run_config import NemesisConfig, RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    cfg = RunConfig(name="java-pipelined", seed=2929, time_limit=15, rate=100, concurrency=2, store=str(tmp_path),
                    workload=WorkloadConfig(client="java", producer="pipelined", in_flight=50, send_fraction=0.9),
                    producer={"acks": "all", "enable.idempotence": True,
                              "max.in.flight.requests.per.connection": 5},
                    nemesis=NemesisConfig(faults=[]))
    outcome = Runner(validate(cfg)).execute()
    assert outcome.exit_code == 0, outcome.exit_code
    sends = [o for o in read_history(outcome.run_dir / "history.jsonl") if o["f"] == "send"]
    done = [o for o in sends if o["type"] != "invoke"]
    assert len(done) > 1000 and all(o["type"] == "ok" for o in done), {o.get("error") for o in done}
    assert all(isinstance(o.get("producer"), str) and len(o["value"]) == 1 for o in sends)
    outstanding: dict[str, set] = defaultdict(set)
    most = 0
    for o in sends:
        procs = outstanding[o["producer"]]
        if o["type"] == "invoke":
            procs.add(o["process"])
            most = max(most, len(procs))
        else:
            procs.discard(o["process"])
    assert most > 5, f"at most {most} sends of one producer were in flight at once"
    config = json.loads((outcome.run_dir / "config.json").read_text())
    assert config["client_settings"]["library"]["name"] == "kafka-clients"
