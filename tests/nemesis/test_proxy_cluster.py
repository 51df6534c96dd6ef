"""The protocol proxy on a real cluster: the workload's clients go through it
(their EndTxns are seen, held and delivered late), the run's history records
what it did, and it goes with the run."""
from __future__ import annotations

import socket

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def test_held_endtxn_run_records_proxy_events_and_stops(tmp_path):
    from harness.run_config import NemesisConfig, RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    rule = {"api": "EndTxn", "action": "hold", "until": "next-produce", "max_hold_ms": 5000, "every": 4}
    cfg = RunConfig(name="proxied", seed=34, time_limit=25, rate=60, concurrency=3, store=str(tmp_path),
                    kafka_version="3.8.1",
                    workload=WorkloadConfig(transactions=True, abort_probability=0.1, send_fraction=0.8),
                    consumer={"isolation.level": "read_committed"},
                    nemesis=NemesisConfig(faults=["proxy"], proxy=[rule]))
    runner = Runner(validate(cfg))
    outcome = runner.execute()
    assert outcome.exit_code in (0, 1), outcome.exit_code  # valid or anomalies: the run itself worked
    ops = list(read_history(outcome.run_dir / "history.jsonl"))

    nemesis = [o for o in ops if o.get("process") == "nemesis" and o["type"] == "info"]
    assert [o["f"] for o in nemesis] == ["proxy-arm", "proxy-heal"]
    assert nemesis[0]["value"]["action"] == "start" and nemesis[1]["value"]["action"] == "heal"

    events = [o for o in ops if o.get("process") == "proxy"]
    holds = [o for o in events if o["f"] == "proxy-hold"]
    assert holds, "no EndTxn was held: did the clients bypass the proxy?"
    for o in holds:
        v = o["value"]
        assert v["api"] == "EndTxn" and v["fault"] == "proxy" and v["nodes"][0] in ("n1", "n2", "n3")
        assert v["transactional_id"] and isinstance(v["committed"], bool) and v["correlation_id"] >= 0
    released = [o for o in events if o["f"] == "proxy-release"]
    assert released and all(o["value"]["released_by"] in ("next-produce", "max_hold_ms") for o in released)
    assert {o["f"] for o in events} <= {"proxy-hold", "proxy-release", "proxy-held-answered", "proxy-discard"}

    for port in runner.proxy.ports.values():  # gone with the run
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
