"""Whole transactions runs on real clusters: committed writes are read back,
aborted ones never are; client crashes hand each worker to new processes."""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

from history.ops import TXN, poll_reads, read_history, txn_micro_ops

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


def test_fault_free_transactions_commit_and_abort_as_recorded(tmp_path):
    from harness.run_config import RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    from tests.harness.test_run import run_containers
    cfg = RunConfig(name="txnfree", seed=2024, time_limit=30, rate=60, concurrency=3, store=str(tmp_path),
                    workload=WorkloadConfig(transactions=True, abort_probability=0.2, send_fraction=0.6),
                    consumer={"isolation.level": "read_committed"})
    outcome = Runner(validate(cfg)).execute()
    ops = list(read_history(outcome.run_dir / "history.jsonl"))
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
