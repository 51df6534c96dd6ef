"""Kafka's end-transaction markers on a real cluster: every committed
transaction's writes settle "commit" from the replicas' logs
(``checkers.kafka_record.txn_outcome``), every transaction aborted by choice
"abort" wherever its writes reached the log.

With ``KCHAOS_CAPTURE_DUMPS=<dir>`` the test also keeps DumpLogSegments' raw
``--print-data-log`` output per node there: tests/broker/fixtures/txn_data_dump.txt
was cut from such a capture (Kafka 4.3.1).
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from checkers.kafka_record import ABORT, ABSENT, COMMIT, load_records, txn_outcome
from history.ops import TXN, read_history, txn_micro_ops

pytestmark = pytest.mark.cluster


def keep_raw_dumps(monkeypatch, into: Path) -> None:
    """Write each data dump's text into ``into`` as the runner's teardown reads it."""
    import broker.log_dump as log_dump
    real_run = log_dump._run

    def run(node, argv, what, *args, **kw):
        text = real_run(node, argv, what, *args, **kw)
        if "--print-data-log" in argv:
            (into / f"{node.name}.txt").write_text(text)
        return text

    into.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(log_dump, "_run", run)


def test_committed_and_aborted_transactions_settle_from_their_markers(tmp_path, monkeypatch):
    from harness.run_config import RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    if capture := os.environ.get("KCHAOS_CAPTURE_DUMPS"):
        keep_raw_dumps(monkeypatch, Path(capture))
    cfg = RunConfig(name="txnmarkers", seed=4242, time_limit=20, rate=60, concurrency=3, store=str(tmp_path),
                    workload=WorkloadConfig(transactions=True, abort_probability=0.3, send_fraction=0.7),
                    consumer={"isolation.level": "read_committed"})
    outcome = Runner(validate(cfg)).execute()
    assert outcome.exit_code != 3
    ops = [o for o in read_history(outcome.run_dir / "history.jsonl") if o["f"] == TXN and o["type"] != "invoke"]
    rr = load_records(outcome.run_dir, None)
    replicas = [r for rs in rr.replicas.values() for r in rs]
    assert replicas and all(r.txn_readable for r in replicas), rr.notes

    def settle(op: dict) -> list[tuple[int, int, object]]:
        return [(p, v, txn_outcome(rr, p, v)) for p, _, v in txn_micro_ops(op["value"], "t")[0]]

    committed = [o for o in ops if o["type"] == "ok"]
    aborted = [o for o in ops if o["type"] == "fail" and o.get("abort")]
    committed_values = [s for o in committed for s in settle(o)]
    aborted_values = [s for o in aborted for s in settle(o)]
    other_values = [s for o in ops if o not in committed and o not in aborted for s in settle(o)]
    counts = {"committed txns": len(committed), "aborted txns": len(aborted),
              "other txns": len(ops) - len(committed) - len(aborted),
              "committed values": dict(Counter(s.state for _, _, s in committed_values)),
              "aborted values": dict(Counter(s.state for _, _, s in aborted_values)),
              "other values": dict(Counter(s.state for _, _, s in other_values)),
              "markers": dict(Counter(m[3] for r in replicas for m in r.markers or []))}
    print(f"txn markers on real Kafka: {counts}")
    (tmp_path / "counts.txt").write_text(repr(counts))

    assert len(committed) >= 5 and len(aborted) >= 2, counts
    wrong = [(p, v, s) for p, v, s in committed_values if s.state != COMMIT]
    assert committed_values and not wrong, wrong[:5]
    wrong = [(p, v, s) for p, v, s in aborted_values if s.state not in (ABORT, ABSENT)]
    assert not wrong, wrong[:5]
    assert any(s.state == ABORT for _, _, s in aborted_values), "some aborted write reached the log"
    # The evidence names the replicas, the value's offset, its producer and the marker.
    _, _, s = committed_values[0]
    assert "COMMIT marker at offset" in s.evidence and "(producer " in s.evidence
