"""Whole transactions runs on real clusters: committed writes are read back,
aborted ones never are, and every transaction settles from Kafka's own
end-transaction markers; client crashes hand each worker to new processes.

The fault-free run is shared by the tests that read it (one run, not one per
test: the suite's time is mostly whole runs).

With ``KCHAOS_CAPTURE_DUMPS=<dir>`` the fault-free run also keeps DumpLogSegments'
raw ``--print-data-log`` output per node there: tests/broker/fixtures/txn_data_dump.txt
was cut from such a capture (Kafka 4.3.1).
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from checkers.kafka_record import ABORT, ABSENT, COMMIT, load_records, txn_outcome
from history.ops import TXN, read_history
from history.op_values import poll_reads, txn_micro_ops

pytestmark = pytest.mark.cluster


def drained(ops: list[dict]) -> tuple[dict[tuple[int, int], int], set[int]]:
    """{(partition, offset): value} read by the final drain, and the partitions
    whose drain completed (last drain op ok)."""
    from workloads.drain import DRAIN_PROCESS_BASE   # the runner's drain processes: base + partition
    out: dict[tuple[int, int], int] = {}
    last: dict[int, str] = {}
    for o in ops:
        if o["f"] == "poll" and o.get("drain") and o["type"] != "invoke":
            for p, offset, value in poll_reads(o["value"], "drain")[0]:
                out[(p, offset)] = value
            last[o["process"] - DRAIN_PROCESS_BASE] = o["type"]
    return out, {p for p, t in last.items() if t == "ok"}


def txn_completions(ops: list[dict]) -> list[dict]:
    return [o for o in ops if o["f"] == TXN and o["type"] != "invoke"]


def harness_errors(run_dir: Path) -> list[str]:
    """Tracebacks in the run's log: a harness thread that crashed (a client's
    exception is an info op, logged without one)."""
    log = (run_dir / "kchaos.log").read_text(errors="replace")
    return [line for line in log.splitlines() if "Traceback" in line]


def keep_raw_dumps(monkeypatch: pytest.MonkeyPatch, into: Path) -> None:
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


@pytest.fixture(scope="module")
def fault_free_txn_run(tmp_path_factory):
    """One fault-free transactional run, read_committed, with enough aborts by
    choice that some aborted writes reach the log: (config, outcome, history)."""
    from harness.run_config import RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    cfg = RunConfig(name="txnfree", seed=2024, time_limit=30, rate=60, concurrency=3,
                    store=str(tmp_path_factory.mktemp("txnfree")),
                    workload=WorkloadConfig(transactions=True, abort_probability=0.3, send_fraction=0.7),
                    consumer={"isolation.level": "read_committed"})
    with pytest.MonkeyPatch.context() as monkeypatch:
        if capture := os.environ.get("KCHAOS_CAPTURE_DUMPS"):
            keep_raw_dumps(monkeypatch, Path(capture))
        outcome = Runner(validate(cfg)).execute()
    return cfg, outcome, list(read_history(outcome.run_dir / "history.jsonl"))


def test_fault_free_transactions_commit_and_abort_as_recorded(fault_free_txn_run):
    from tests.harness.test_run import run_containers
    cfg, outcome, ops = fault_free_txn_run
    assert outcome.exit_code != 3 and not harness_errors(outcome.run_dir)

    txns = txn_completions(ops)
    committed = [o for o in txns if o["type"] == "ok"]
    chosen_aborts = [o for o in txns if o["type"] == "fail" and o.get("abort")]
    # Enough of each to mean something; how many a loaded machine makes is bench material.
    assert len(committed) >= 5 and len(chosen_aborts) >= 1, (len(committed), len(chosen_aborts))
    assert all(o.get("isolation") == "read_committed" and isinstance(o.get("producer"), str) for o in txns)
    invokes = {o["index"]: o for o in ops if o["f"] == TXN and o["type"] == "invoke"}
    assert sum(bool(o.get("abort")) for o in invokes.values()) >= len(chosen_aborts)

    drain, complete = drained(ops)
    assert complete == set(range(cfg.workload.partitions)), "every partition drained to its end"
    committed_writes = [w for o in committed for w in txn_micro_ops(o["value"], "t")[0]]
    assert len(committed_writes) >= 5
    assert all(offset is not None for _, offset, _ in committed_writes), "a committed send has its offset"
    missing = [w for w in committed_writes if drain.get((w[0], w[1])) != w[2]]
    assert not missing, f"{len(missing)} committed writes not in the read_committed drain: {missing[:5]}"
    aborted_writes = {(p, v) for o in txns if o["type"] == "fail" for p, _, v in txn_micro_ops(o["value"], "t")[0]}
    assert aborted_writes, "some aborted transaction wrote"
    seen = {(p, v) for (p, _), v in drain.items()}
    assert not aborted_writes & seen, "an aborted write is visible to read_committed"

    # Transactions read: a read_committed poll never returns an aborted write either.
    reads = {(p, v) for o in txns for p, _, v in txn_micro_ops(o["value"], "t")[1]}
    assert reads and not reads & aborted_writes

    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert results["valid"] is not False, {t: a.get("count") for t, a in results.get("anomalies", {}).items()
                                           if a.get("count")}
    assert run_containers(os.getpid(), "txnfree-") == []


def test_committed_and_aborted_transactions_settle_from_their_markers(fault_free_txn_run):
    """Every committed transaction's writes settle "commit" from the replicas'
    logs (``checkers.kafka_record.txn_outcome``), every transaction aborted by
    choice "abort" wherever its writes reached the log."""
    _, outcome, history = fault_free_txn_run
    assert outcome.exit_code != 3
    ops = txn_completions(history)
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

    assert len(committed) >= 5 and len(aborted) >= 2, counts
    wrong = [(p, v, s) for p, v, s in committed_values if s.state != COMMIT]
    assert committed_values and not wrong, wrong[:5]
    wrong = [(p, v, s) for p, v, s in aborted_values if s.state not in (ABORT, ABSENT)]
    assert not wrong, wrong[:5]
    assert any(s.state == ABORT for _, _, s in aborted_values), "some aborted write reached the log"
    # The evidence names the replicas, the value's offset, its producer and the marker.
    _, _, s = committed_values[0]
    assert "COMMIT marker at offset" in s.evidence and "(producer " in s.evidence


def test_client_crashes_under_kills_move_every_worker_to_new_processes(tmp_path):
    from harness.run_config import NemesisConfig, RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    from tests.harness.test_run import run_containers, run_networks
    cfg = RunConfig(name="txncrash", seed=99, time_limit=30, rate=60, concurrency=2, store=str(tmp_path),
                    workload=WorkloadConfig(transactions=True, crash_interval=5, send_fraction=0.6),
                    nemesis=NemesisConfig(faults=["kill"], interval=6))
    outcome = Runner(validate(cfg)).execute()
    assert outcome.exit_code != 3 and not outcome.interrupted and not harness_errors(outcome.run_dir)
    ops = list(read_history(outcome.run_dir / "history.jsonl"))
    assert any(o["value"].get("fault") == "kill" and o["value"].get("action") == "start" for o in ops
               if o["process"] == "nemesis" and o["type"] == "info"), "a broker was killed"

    # Each crash: the worker's process is dropped and a new one goes on.
    log = (outcome.run_dir / "kchaos.log").read_text(errors="replace")
    crashes = re.findall(r"worker (\d+): crashing process (\d+) .*going on as process (\d+)", log)
    per_worker: dict[int, list[int]] = defaultdict(list)
    for w, old, new in crashes:
        per_worker[int(w)] += [int(old), int(new)]
    assert set(per_worker) == {0, 1} and all(len(set(v)) >= 3 for v in per_worker.values()), per_worker
    client_procs = {o["process"] for o in ops if isinstance(o["process"], int) and not o.get("drain")}
    ran = {int(w) for w, _, new in crashes if int(new) in client_procs}
    assert ran == {0, 1}, "each worker's successors ran ops"
    # No op is outstanding when a process is dropped: every invoke has its completion.
    open_ops: dict[int, dict] = {}
    for o in ops:
        if isinstance(o["process"], int) and not o.get("drain"):
            if o["type"] == "invoke":
                assert o["process"] not in open_ops
                open_ops[o["process"]] = o
            else:
                open_ops.pop(o["process"], None)
    assert not open_ops

    # Committed writes are still read back (acks=all, min.insync.replicas 2) where the drain completed.
    drain, complete = drained(ops)
    committed = [w for o in txn_completions(ops) if o["type"] == "ok" for w in txn_micro_ops(o["value"], "t")[0]]
    assert committed
    missing = [w for w in committed if w[0] in complete and drain.get((w[0], w[1])) != w[2]]
    assert not missing, f"{len(missing)} committed writes not in the drain: {missing[:5]}"

    assert run_containers(os.getpid(), "txncrash-") == [] and not [
        n for n in run_networks(os.getpid()) if n.attrs["Labels"].get("kchaos.cluster", "").startswith("txncrash-")]
