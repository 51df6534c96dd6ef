"""Whole consumer-group runs on real clusters: members subscribe, commit (sync
and async) and rebalance; what they read after an assignment starts at the
group's committed offset; faults leave nothing behind."""
from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from history.ops import COMMIT, INVOKE, OK, POLL, REBALANCE, SUBSCRIBE, read_history
from history.op_values import offsets_map, poll_reads, rebalance_view

pytestmark = pytest.mark.cluster


def _run(tmp_path, name: str, crash_interval: float = 0.0, consumer: dict | None = None, **kw):
    from harness.run_config import RunConfig, WorkloadConfig, validate
    from harness.runner import Runner
    workload = WorkloadConfig(mode="subscribe", commit_fraction=0.15, async_commit_probability=0.5,
                              send_fraction=0.5, op_timeout=8.0, crash_interval=crash_interval)
    # A member that died without leaving holds its partitions for session.timeout.ms
    # (45 s by default): longer than these runs.
    consumer = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 2000, **(consumer or {})}
    cfg = RunConfig(name=name, store=str(tmp_path), rate=120, concurrency=4, workload=workload,
                    consumer=consumer, broker={"group.initial.rebalance.delay.ms": 0}, **kw)
    outcome = Runner(validate(cfg)).execute()
    return outcome, list(read_history(outcome.run_dir / "history.jsonl"))


def _no_containers(prefix: str) -> bool:
    from tests.harness.test_run import run_containers, run_networks
    return run_containers(os.getpid(), prefix) == [] and not [
        n for n in run_networks(os.getpid()) if n.attrs["Labels"].get("kchaos.cluster", "").startswith(prefix)]


def _check_member_ops(ops: list, group: str) -> None:
    """Every member op names the group and isolation; each rebalance event
    directly follows a completion (or another event) of its own process."""
    last: dict = {}
    for o in ops:
        if not isinstance(o["process"], int) or o.get("drain"):
            continue
        if o["f"] in (SUBSCRIBE, POLL, COMMIT, REBALANCE):
            assert o.get("group") == group and o.get("isolation") == "read_committed", o
        if o["f"] == REBALANCE:
            assert o["type"] == OK and last.get(o["process"], {}).get("type") not in (None, INVOKE), o
            assert set(o["value"]) >= {"assigned", "revoked", "generation", "member"}
        last[o["process"]] = o


def reads_below_committed(ops: list) -> tuple[list, list]:
    """(broken, checked): a member's first read of partition p after an event
    assigning p must be at or after the offset of the group's last ok commit
    of p that completed before the op during which the member got p began.
    Reads within that op are not judged (they may predate the callback).
    ``checked`` lists every (read offset, committed offset) judged."""
    last_invoke: dict[int, int] = {}
    commits: list[tuple[int, dict[int, int]]] = []        # (completion index, offsets)
    watch: dict[tuple[int, int], tuple[int, int]] = {}    # (process, p) -> (floor, event index)
    bad, checked = [], []
    for o in ops:
        proc, where = o["process"], f"op {o.get('index')}"
        if not isinstance(proc, int) or o.get("drain"):
            continue
        if o["type"] == INVOKE:
            last_invoke[proc] = o["index"]
        elif o["f"] == COMMIT and o["type"] == OK:
            commits.append((o["index"], dict(offsets_map(o["value"], where))))
        elif o["f"] == REBALANCE:
            assigned, revoked, _ = rebalance_view(o["value"], where)
            for p in revoked:
                watch.pop((proc, p), None)
            began = last_invoke.get(proc, -1)
            for p in assigned:
                floor = next((c[p] for i, c in reversed(commits) if i < began and p in c), 0)
                watch[(proc, p)] = (floor, o["index"])
        elif o["f"] == POLL and o["type"] == OK:
            msgs, _ = poll_reads(o["value"], where)
            first: dict[int, int] = {}
            for p, offset, _ in msgs:
                first.setdefault(p, offset)
            for p, offset in first.items():
                if (proc, p) in watch:
                    floor, ev = watch.pop((proc, p))
                    checked.append((offset, floor))
                    if offset < floor:
                        bad.append({"process": proc, "partition": p, "read": offset, "committed": floor,
                                    "event": ev, "poll": o["index"]})
    return bad, checked


def test_fault_free_group_run_commits_rebalances_and_resumes_at_committed_offsets(tmp_path):
    # Client crashes (a member closed between two ops, a new one joining) make
    # rebalances after commits, so assignments start from committed offsets.
    outcome, ops = _run(tmp_path, "group", seed=515, time_limit=30, crash_interval=10.0,
                        consumer={"partition.assignment.strategy": "range"})
    group = "kchaos-515"
    assert outcome.exit_code in (0, 2), outcome.exit_code   # no harness error
    _check_member_ops(ops, group)
    members = {o["process"] for o in ops if o["f"] == SUBSCRIBE and o["type"] == OK}
    assert len(members) >= 4

    commits = [o for o in ops if o["f"] == COMMIT and o["type"] != INVOKE]
    ok_sync = [o for o in commits if o["type"] == OK and not o.get("async") and o["value"]]
    ok_async = [o for o in commits if o["type"] == OK and o.get("async") and o["value"]]
    assert ok_sync and ok_async, ({o["type"] for o in commits}, len(commits))
    assert all(isinstance(off, int) and off >= 0 for o in ok_sync + ok_async for off in o["value"].values())

    rebalances = [o for o in ops if o["f"] == REBALANCE]
    assigned = {p for o in rebalances for p in o["value"]["assigned"]}
    assert assigned == {0, 1, 2}, assigned
    assert any(isinstance(o["value"]["generation"], int) for o in rebalances)
    assert len({o["process"] for o in rebalances if o["value"]["assigned"]}) >= 2, "partitions spread over members"

    reads_after = defaultdict(int)
    for o in ops:
        if o["f"] == POLL and o["type"] == OK and not o.get("drain") and o["value"]:
            reads_after[o["process"]] += 1
    assert len(reads_after) >= 2
    bad, checked = reads_below_committed(ops)
    assert not bad, bad[:5]
    assert any(committed > 0 for _, committed in checked), checked   # the property was put to the test

    results = json.loads((outcome.run_dir / "results.json").read_text())
    assert results["valid"] is not False, {t: a.get("count") for t, a in results.get("anomalies", {}).items()
                                          if a.get("count")}
    assert _no_containers("group-")


def test_group_run_under_kills_and_pauses_completes_and_leaves_nothing(tmp_path):
    from harness.run_config import NemesisConfig
    outcome, ops = _run(tmp_path, "groupfault", seed=616, time_limit=30,
                        consumer={"partition.assignment.strategy": "cooperative-sticky"},
                        nemesis=NemesisConfig(faults=["kill", "pause"], interval=6))
    assert outcome.exit_code in (0, 1, 2), outcome.exit_code   # a verdict, not a harness error
    _check_member_ops(ops, "kchaos-616")
    assert any(o["process"] == "nemesis" and o["type"] == "info" and isinstance(o["value"], dict)
               and o["value"].get("action") == "start" for o in ops), "a fault started"
    assert [o for o in ops if o["f"] == COMMIT and o["type"] != INVOKE]
    assert {p for o in ops if o["f"] == REBALANCE for p in o["value"]["assigned"]} == {0, 1, 2}
    assert (outcome.run_dir / "results.json").exists()
    assert _no_containers("groupfault-")
