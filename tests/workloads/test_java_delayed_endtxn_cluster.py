"""The held-EndTxn scenario (examples/txn-delayed-produce-java.toml) with the
Java client on Kafka 4.3.1: kafka-clients speaks transactions v2 there
(EndTxn version 5, the epoch bumped at every EndTxn), so a late EndTxn meets
the producer's next transaction under a newer epoch and is refused, never
accepted (one released by max_hold_ms, after a transaction that never
wrote, may be answered as a retry) (docs/findings.md, "KAFKA-17754 on demand with the Java client")."""
from __future__ import annotations

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster

PRODUCER_FENCED = 90


def key(event: dict) -> tuple:
    return event["nodes"][0], event["client_id"], event["correlation_id"]


def test_late_endtxn_is_fenced_under_transactions_v2(tmp_path):
    from harness.run_config import NemesisConfig, RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    rule = {"api": "EndTxn", "action": "hold", "until": "next-produce", "max_hold_ms": 5000, "every": 3}
    cfg = RunConfig(name="java-late-endtxn", seed=29, time_limit=20, rate=60, concurrency=3, store=str(tmp_path),
                    kafka_version="4.3.1",
                    workload=WorkloadConfig(client="java", transactions=True, abort_probability=0.1,
                                            send_fraction=0.8),
                    consumer={"isolation.level": "read_committed"},
                    nemesis=NemesisConfig(faults=["proxy"], proxy=[rule]))
    outcome = Runner(validate(cfg)).execute()
    assert outcome.exit_code == 0, outcome.exit_code
    events = [o["value"] for o in read_history(outcome.run_dir / "history.jsonl") if o.get("process") == "proxy"]
    holds = [v for v in events if v["event"] == "hold"]
    assert holds and all(v["api_version"] == 5 for v in holds), holds[:3]
    after_produce = {key(v) for v in events if v["event"] == "release" and v["released_by"] == "next-produce"}
    answered = [v for v in events if v["event"] == "held-answered" and key(v) in after_produce]
    assert answered, "no held EndTxn reached the coordinator after the next transaction wrote"
    assert all(v["error_code"] != 0 for v in answered), [v for v in answered if v["error_code"] == 0]
    assert any(v["error_code"] == PRODUCER_FENCED for v in answered)
