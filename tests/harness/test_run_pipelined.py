"""A whole run with pipelined producers on a real cluster, under broker kills and client crashes."""
from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def test_pipelined_idempotent_run_under_kills_keeps_many_sends_in_flight_and_is_valid(tmp_path):
    from harness.run_config import RunConfig, WorkloadConfig, NemesisConfig, validate
    from harness.runner import Runner
    from tests.harness.test_run import run_containers, run_networks
    # 25 s of seed 4242: one kill and its restart, and three client crashes (harness/schedule.py)
    cfg = RunConfig(name="pipelined", seed=4242, time_limit=25, rate=1500, concurrency=2, store=str(tmp_path),
                    workload=WorkloadConfig(producer="pipelined", in_flight=5, send_fraction=0.8,
                                            crash_interval=12),
                    nemesis=NemesisConfig(faults=["kill"], interval=8),
                    producer={"acks": "all", "enable.idempotence": True,
                              "max.in.flight.requests.per.connection": 5},
                    # librdkafka can duplicate an idempotent producer's batches after an in-flight
                    # timeout (confluentinc/librdkafka#4953; docs/findings.md): that is
                    # Kafka's client, not what this test is about
                    checker={"allowed": {"duplicate": "librdkafka#4953"}})
    outcome = Runner(validate(cfg)).execute()
    ops = list(read_history(outcome.run_dir / "history.jsonl"))

    sends = [o for o in ops if o["f"] == "send"]
    assert all(isinstance(o.get("producer"), str) for o in sends), "every send names its producer"
    assert all(len(o["value"]) == 1 for o in sends)
    assert any(o["value"].get("fault") == "kill" and o["value"].get("action") == "start" for o in ops
               if o["process"] == "nemesis" and o["type"] == "info"), "a broker was killed"

    # Many sends of one producer in flight at once: each on a process of its own.
    outstanding: dict[str, set] = defaultdict(set)
    most = 0
    for o in sends:
        procs = outstanding[o["producer"]]
        if o["type"] == "invoke":
            assert o["process"] not in procs, "one op outstanding per process"
            procs.add(o["process"])
            most = max(most, len(procs))
        else:
            procs.discard(o["process"])
    assert most == 5, f"at most {most} sends of one producer were in flight at once"
    assert not any(outstanding.values()), "every send completed"
    # crash_interval: each worker's producer was dropped with sends in flight and replaced
    names = {o["producer"] for o in sends}
    assert len(names) >= 4, f"producers {sorted(names)}: the crashes did not replace them"
    crashed = [o for o in sends if o["type"] == "info" and any(
        w in (o.get("error") or "") for w in ("crash", "_PURGE_INFLIGHT"))]
    assert crashed, "no send was in flight at a crash"
    # the columnar copy, paired in a process of its own as the run went, is the history's
    from history import convert
    from history.parquet import parquet_is_current
    import pyarrow.parquet as pq
    jsonl, parquet = outcome.run_dir / "history.jsonl", outcome.run_dir / "history.parquet"
    assert parquet_is_current(jsonl, parquet)
    assert pq.read_table(parquet).to_pylist() == convert.history_table(jsonl).to_pylist()
    acked = [o for o in sends if o["type"] == "ok"]
    assert len(acked) >= 100, f"only {len(acked)} acknowledged sends"

    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert results["valid"] is True and outcome.exit_code == 0, (results.get("unknown"), {
        t: a.get("count") for t, a in results.get("anomalies", {}).items() if a.get("count")})
    assert run_containers(os.getpid(), "pipelined-") == [] and not [
        n for n in run_networks(os.getpid()) if n.attrs["Labels"].get("kchaos.cluster", "").startswith("pipelined-")]
