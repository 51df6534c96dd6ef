"""A whole share-group run on a real 4.3.1 cluster (docs/design.md, "Share
groups"): fault-free, explicit acknowledgements with releases, rejects and a
held poll; the group delivers, answers every mark, the share drain completes,
and the checkers find the run valid."""
from __future__ import annotations

import pytest

from history.ops import SHARE_ACKED, SHARE_END, SHARE_HOLD, SHARE_POLL, read_history
from history.op_values import share_deliveries

pytestmark = pytest.mark.cluster


def test_fault_free_share_run_is_valid(tmp_path):
    from harness.run_config import RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    workload = WorkloadConfig(mode="share", send_fraction=0.5, op_timeout=8.0, share_lock_ms=3000, share_session_timeout_ms=6000,
                              poll_timeout=0.2, share_release_probability=0.2, share_reject_probability=0.05,
                              share_hold_probability=0.15)
    cfg = RunConfig(name="share", store=str(tmp_path), rate=80, concurrency=3, time_limit=15, workload=workload,
                    broker={"group.share.min.record.lock.duration.ms": 1000,
                                                                 "group.share.min.session.timeout.ms": 6000}, drain_timeout=60)
    outcome = Runner(validate(cfg)).execute()
    ops = list(read_history(outcome.run_dir / "history.jsonl"))
    deliveries = [d for o in ops if o["f"] == SHARE_POLL and o["type"] == "ok"
                  for d in share_deliveries(o["value"], "test")]
    assert deliveries, "the share group delivered nothing"
    assert any(o["f"] == SHARE_ACKED and o["type"] == "ok" for o in ops)
    assert any(o["f"] == SHARE_HOLD and o["type"] == "ok" for o in ops), "no member held records past the lock"
    (end,) = [o for o in ops if o["f"] == SHARE_END]
    assert end["value"]["complete"], end
    assert outcome.verdict is True, (outcome.run_dir / "results.json").read_text()[:3000]
