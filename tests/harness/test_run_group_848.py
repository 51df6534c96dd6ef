"""The two KIP-848 scenarios on the real cluster, fault-free and short: the
consumer protocol (examples/consumer-group-848.toml) and a migration between
the protocols (examples/group-migration.toml) run valid, their rebalance
events name the protocol each member ran, and the group's committed offsets
are read at each sample and once after the drain."""
from __future__ import annotations

from pathlib import Path

import pytest

from history.ops import OFFSET_SAMPLER, OFFSETS, OK, REBALANCE, read_history

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(tmp_path: Path, example: str, **workload) -> tuple[object, list[dict]]:
    from harness.run_config import load, validate
    from harness.runner import Runner
    cfg = load(EXAMPLES / example)
    cfg.store, cfg.seed, cfg.time_limit, cfg.rate = str(tmp_path), 848, 20.0, 120
    cfg.nemesis.faults = []
    for key, value in workload.items():
        setattr(cfg.workload, key, value)
    outcome = Runner(validate(cfg)).execute()
    return outcome, list(read_history(outcome.run_dir / "history.jsonl"))


def _offsets_reads(ops: list[dict]) -> list[dict]:
    reads = [o for o in ops if o["process"] == OFFSET_SAMPLER and o["f"] == OFFSETS and o["type"] == OK]
    assert len(reads) >= 10 and reads[-1].get("final"), len(reads)
    assert all(o["group"] == "kchaos-848" for o in reads)
    assert any(isinstance(v, int) for v in reads[-1]["value"].values()), reads[-1]
    return reads


@pytest.mark.long   # a whole run (~60 s); the suite's migration run below runs the consumer protocol too
def test_consumer_protocol_run_is_valid_with_its_committed_offsets_read(tmp_path: Path):
    outcome, ops = _run(tmp_path, "consumer-group-848.toml")
    assert outcome.exit_code == 0, outcome.verdict
    _offsets_reads(ops)
    rebalances = [o for o in ops if o["f"] == REBALANCE]
    assert rebalances and {o["value"]["protocol"] for o in rebalances} == {"consumer"}
    assert {p for o in rebalances for p in o["value"]["assigned"]} == {0, 1, 2}


def test_migration_run_moves_members_between_protocols_and_is_valid(tmp_path: Path):
    outcome, ops = _run(tmp_path, "group-migration.toml", crash_interval=6.0)
    assert outcome.exit_code == 0, outcome.verdict
    _offsets_reads(ops)
    protocols = {o["value"]["protocol"] for o in ops if o["f"] == REBALANCE and o["value"]["assigned"]}
    assert protocols == {"classic", "consumer"}, protocols
