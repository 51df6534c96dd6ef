"""A whole short run whose final drain is cut short: the history says so, per
partition, and the verdict is unknown (exit 2) with the drain as its reason."""
from __future__ import annotations

import json

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def test_a_drain_cut_short_is_info_with_a_reason_and_the_verdict_unknown(tmp_path):
    from harness.run_config import RunConfig, validate
    from harness.runner import EXIT_UNKNOWN, Runner
    # A drain deadline that has passed before the first fetch, whatever the machine's speed (50 ms was
    # enough to read 300 records of a partition on a quiet machine): no partition is read to its end.
    cfg = validate(RunConfig(name="shortdrain", seed=4321, time_limit=10, rate=100, concurrency=4, recovery=0,
                             drain_wait=30, drain_timeout=1e-6, store=str(tmp_path)))
    outcome = Runner(cfg).execute()
    ops = list(read_history(outcome.run_dir / "history.jsonl"))

    acked_max: dict[int, int] = {}
    for o in ops:
        if o["f"] == "send" and o["type"] != "invoke":
            for p, _, off in o["value"]:
                if off is not None:
                    acked_max[p] = max(acked_max.get(p, -1), off)
    assert acked_max, "the run acknowledged nothing"

    drains = [o for o in ops if o.get("drain") and o["type"] != "invoke"]
    by_process: dict[int, list[dict]] = {}
    for o in drains:
        by_process.setdefault(o["process"], []).append(o)
    assert len(by_process) == cfg.workload.partitions
    for process, mine in by_process.items():
        last = mine[-1]
        p = process - 1_000_000
        assert last["type"] == "info", last
        assert last["value"] is None
        assert last["error"].startswith(f"drain of partition {p} incomplete:"), last["error"]
        assert "before the timeout" in last["error"]
        wm = last["watermarks"]
        assert wm["max_acked"] == acked_max.get(p)
        if wm["high"] is not None:      # it got the watermarks, not the whole partition
            assert last["end"] < wm["high"]
        else:
            assert last["end"] is None
        # The wait before the drain had nothing to wait for: a fault-free run.
        assert last["wait"]["reached"] is True and last["wait"]["waited_s"] < 30
        assert last["wait"]["why"].startswith("high watermark") or last["wait"]["why"] == "all replicas in ISR"

    # Verdict: an incomplete drain cannot prove anything complete.
    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert outcome.exit_code == EXIT_UNKNOWN, (outcome.exit_code, results.get("unknown"), results.get("errors"))
    assert results["valid"] == "unknown"
    reasons = [*results.get("unknown", []), *results.get("errors", [])]
    assert any("drain" in r for r in reasons), reasons
