"""`kchaos reproduce` compares what ran: the executed fault sequence, anomaly types, verdict."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.reproduce import RunSummary, compare, executed_faults, render

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
WORKLOAD_START = 30 * S  # the history clock starts before the cluster is up


def history(*faults: tuple, origin: int = WORKLOAD_START) -> list[dict]:
    """Client ops from ``origin``, then nemesis invoke/info pairs:
    (time s since workload start, f, action, fault, nodes, planned value)."""
    ops: list[dict] = [{"time": origin, "process": 0, "type": "invoke", "f": "subscribe", "value": "kchaos"},
                       {"time": origin + 1000, "process": 0, "type": "ok", "f": "subscribe", "value": "kchaos"}]
    for t, f, action, fault, nodes, planned in faults:
        at = origin + int(t * S)
        ops.append({"time": at, "process": "nemesis", "type": "invoke", "f": f, "value": dict(planned)})
        done = {**planned, "fault": fault, "action": action}
        if nodes is not None:
            done["nodes"] = nodes
        ops.append({"time": at + S // 2, "process": "nemesis", "type": "info", "f": f, "value": done})
    return [dict(op, index=i) for i, op in enumerate(ops)]


KILL_N2 = (5.0, "kill", "start", "kill", ["n2"], {"fault": "kill", "target": "node", "node_index": 1})
RESTART = (10.0, "start", "stop", "kill", ["n2"], {"fault": "kill"})
PAUSE_LEADER = (15.0, "pause", "start", "pause", ["n1"], {"fault": "pause", "target": "leader", "partition_index": 7})
RESUME = (20.0, "resume", "stop", "pause", ["n1"], {"fault": "pause"})
BASE = (KILL_N2, RESTART, PAUSE_LEADER, RESUME)


def summary(*faults, results=None, origin=WORKLOAD_START) -> RunSummary:
    return RunSummary.of(history(*faults, origin=origin), results or {"valid": True, "anomalies": {}})


def shifted(step: tuple, dt: float) -> tuple:
    return (step[0] + dt, *step[1:])


def test_executed_faults_read_from_the_history():
    steps = executed_faults(history(*BASE))
    assert [(s.f, s.action, s.fault, s.nodes, s.at_s) for s in steps] == [
        ("kill", "start", "kill", ("n2",), 5.0), ("start", "stop", "kill", ("n2",), 10.0),
        ("pause", "start", "pause", ("n1",), 15.0), ("resume", "stop", "pause", ("n1",), 20.0)]
    assert [s.fixed for s in steps] == [True, True, False, False]  # a stop inherits its start's target
    assert steps[2].target == "leader partition_index=7"


def test_failed_fault_ops_did_not_execute():
    ops = history(*BASE)
    ops[3]["value"] = {"fault": "kill", "action": None, "error": "broker transport failure"}
    assert [s.f for s in executed_faults(ops)] == ["start", "pause", "resume"]


def test_equal_runs_match_even_with_another_setup_time_and_jitter():
    a = summary(*BASE)
    b = summary(*(shifted(s, 1.5) for s in BASE), origin=WORKLOAD_START + 17 * S)
    cmp = compare(a, b)
    assert cmp.matches and cmp.differences() == []


def test_a_missing_fault_is_a_mismatch():
    cmp = compare(summary(*BASE), summary(KILL_N2, RESTART, RESUME))
    assert not cmp.matches and not cmp.same_faults
    diffs = cmp.differences()
    assert "fault steps: 4 executed in the original, 3 in the reproduction" in diffs
    assert any("missing in the reproduction" in d and "pause" in d for d in diffs), diffs
    assert sum(bool(r.mismatches) for r in cmp.rows) == 1  # aligned: only the missing step differs


def test_a_different_kind_is_a_mismatch():
    pause_n2 = (5.0, "pause", "start", "pause", ["n2"], {"fault": "pause", "target": "node", "node_index": 1})
    resume = (10.0, "resume", "stop", "pause", ["n2"], {"fault": "pause"})
    cmp = compare(summary(*BASE), summary(pause_n2, resume, PAUSE_LEADER, RESUME))
    assert not cmp.matches
    text = "\n".join(cmp.differences())
    assert "kill" in text and "pause" in text and "fault step 1" in text


def test_a_gap_beyond_tolerance_is_a_mismatch():
    # the restart came 6 s later after the kill completed; the steps after it keep their gaps
    late = (KILL_N2, *(shifted(s, 6.0) for s in (RESTART, PAUSE_LEADER, RESUME)))
    assert not compare(summary(*BASE), summary(*late)).matches
    assert compare(summary(*BASE), summary(*late), tolerance_s=7.0).matches
    (diff,) = compare(summary(*BASE), summary(*late)).differences()
    assert diff.startswith("fault step 2: gap after the previous step 4.5s vs 10.5s"), diff


def test_nodes_are_compared_only_where_the_plan_fixed_them():
    other_leader = [(*PAUSE_LEADER[:4], ["n3"], PAUSE_LEADER[5]), (*RESUME[:4], ["n3"], RESUME[5])]
    cmp = compare(summary(*BASE), summary(KILL_N2, RESTART, *other_leader))
    assert cmp.matches and any(r.notes for r in cmp.rows)
    other_node = (KILL_N2[0], "kill", "start", "kill", ["n3"], KILL_N2[5])
    cmp = compare(summary(*BASE), summary(other_node, RESTART, PAUSE_LEADER, RESUME))
    assert not cmp.matches and "fault step 1: nodes n2 != n3" in cmp.differences()
    other_plan = (KILL_N2[0], "kill", "start", "kill", ["n2"], {"fault": "kill", "target": "controller"})
    cmp = compare(summary(*BASE), summary(other_plan, RESTART, PAUSE_LEADER, RESUME))
    assert not cmp.matches and any("planned target" in d for d in cmp.differences())


def test_anomaly_types_and_verdict_are_compared():
    bad = {"valid": False, "anomalies": {"lost-write": {"count": 2}, "duplicate": {"count": 1, "allowed": True}}}
    cmp = compare(summary(*BASE), summary(*BASE, results=bad))
    assert not cmp.same_types and not cmp.same_verdict and cmp.same_faults
    assert cmp.reproduction.anomaly_types == ["lost-write"]  # allowed types do not count
    assert "verdict: original valid, reproduction invalid" in cmp.differences()


def test_render_shows_both_sides_and_marks_the_difference():
    console = Console(record=True, width=200)
    render(compare(summary(*BASE), summary(KILL_N2, RESTART, RESUME)), console, "reproduction 1/1")
    out = console.export_text()
    assert "original" in out and "reproduction" in out and "DIFF" in out and "—" in out
    assert "planned-schedule digest" in out
    assert "DIFFERENT fault step 3: missing in the reproduction" in out


@pytest.mark.cluster
@pytest.mark.long   # two whole runs (~140 s); the suite's cluster test reproduces a run, the comparison is unit-tested here
def test_reproduce_of_an_edited_config_exits_1_and_names_the_difference(tmp_path):
    def kchaos(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                              timeout=400, cwd=ROOT, env={**__import__("os").environ, "COLUMNS": "200"})
    store = tmp_path / "store"
    run = kchaos("run", "--time-limit", "20", "--nemesis", "kill", "--nemesis-interval", "5", "--seed", "7",
                 "--store", str(store), "--name", "r")
    assert run.returncode in (0, 1, 2), run.stderr[-3000:]
    run_dir = (store / "r" / "latest").resolve()
    original = executed_faults(json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()
                               if '"kchaos-history"' not in line)
    assert any(s.fault == "kill" for s in original), "the original run executed no kill"
    cfg_path = run_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["nemesis"]["faults"] = ["pause"]
    cfg_path.write_text(json.dumps(cfg))

    rep = kchaos("reproduce", str(run_dir), "--store", str(store))
    assert rep.returncode == 1, rep.stdout + rep.stderr[-3000:]
    assert "Traceback" not in rep.stderr
    assert "the plan recomputed from config.json differs from the stored digest" in rep.stdout
    line = next(l for l in rep.stdout.splitlines() if l.startswith("reproduction 1/1: ") and "verdict" in l)
    assert "DIFFERENT" in line and "fault sequence DIFFERENT" in line, rep.stdout
    diffs = [l for l in rep.stdout.splitlines() if l.startswith("DIFFERENT fault step")]
    assert any("kill" in d and "pause" in d for d in diffs), rep.stdout


def test_final_phase_heals_are_compared_without_their_time():
    heal = (30.0, "start", "stop", "kill", ["n1", "n2", "n3"], {"fault": "kill", "target": "all"})
    a = RunSummary.of(history(*BASE, heal), {"valid": True}, time_limit_s=20.0)
    b = RunSummary.of(history(*BASE, shifted(heal, -8.0)), {"valid": True}, time_limit_s=20.0)
    cmp = compare(a, b)
    assert cmp.matches and cmp.rows[-1].notes
    early = RunSummary.of(history(*BASE, shifted(heal, -12.0)), {"valid": True}, time_limit_s=20.0)
    assert not compare(a, early).matches  # 18 s: still in the workload, so its time counts


def test_a_one_way_cut_of_the_leader_is_a_run_time_target():
    """The unclean-election scenario's one-way cut names a fixed topology and the
    leader: the leader is resolved at run time, so other nodes are a note."""
    planned = {"fault": "partition", "topology": "one-way", "target": "leader", "partition_index": 3, "ports": [9092]}
    cut = lambda nodes: (4.0, "start-partition", "start", "partition", nodes, planned)  # noqa: E731
    cmp = compare(summary(cut(["n1"])), summary(cut(["n2"])))
    assert cmp.matches and any("run-time target" in n for r in cmp.rows for n in r.notes)
    # The nemesis's completion names the resolved leader, not the planned target: the invoke's value decides.
    a, b = (history(cut(nodes)) for nodes in (["n1"], ["n2"]))
    for ops in (a, b):
        ops[-1]["value"] = {k: v for k, v in ops[-1]["value"].items() if k != "target"}
    cmp = compare(RunSummary.of(a, {"valid": True}), RunSummary.of(b, {"valid": True}))
    assert cmp.matches, cmp.mismatches


def test_steps_that_drift_by_what_earlier_steps_took_still_match():
    """Each step runs its planned gap after the previous nemesis op completed
    (harness/fault_pacing.py): a kill that took 9 s longer under load moves
    every later step 9 s, and that is the same schedule."""
    slow = history(*BASE)
    for op in slow[3:]:                  # the kill's completion and everything after it
        op["time"] += 9 * S
    cmp = compare(RunSummary.of(history(*BASE), {"valid": True}), RunSummary.of(slow, {"valid": True}))
    assert cmp.matches, cmp.mismatches
    assert [round(s.gap_s, 3) for s in executed_faults(slow)] == [5.0, 4.5, 4.5, 4.5]


LOST = {"valid": False, "anomalies": {"lost-write": {"count": 3}, "unclean-election": {"count": 1}}}
LOST_AND_MORE = {"valid": False, "anomalies": {"lost-write": {"count": 1}, "unclean-election": {"count": 1},
                                               "poll-skip": {"count": 2}}}


def test_the_failure_came_back_is_answered_apart_from_everything_matched():
    cmp = compare(summary(*BASE, results=LOST), summary(*BASE, results=LOST_AND_MORE))
    assert not cmp.matches and cmp.failure_came_back is True     # more types: still the same failure
    cmp = compare(summary(*BASE, results=LOST), summary(*BASE))
    assert cmp.failure_came_back is False
    only_skip = {"valid": False, "anomalies": {"poll-skip": {"count": 2}}}
    assert compare(summary(*BASE, results=LOST), summary(*BASE, results=only_skip)).failure_came_back is False
    assert compare(summary(*BASE), summary(*BASE, results=LOST)).failure_came_back is None  # nothing failed


def test_software_differences_are_shown_first_as_notes():
    a, b = summary(*BASE), summary(*BASE)
    a.ran_on = {"packages": {"librdkafka": "2.16.1"}, "kchaos": {"commit": "abc", "dirty": False}}
    b.ran_on = {"packages": {"librdkafka": "2.15.0"}, "kchaos": {"commit": "abc", "dirty": False}}
    cmp = compare(a, b)
    assert cmp.matches and cmp.software_differences() == ["packages.librdkafka: 2.16.1 != 2.15.0"]
    console = Console(record=True, width=200)
    render(cmp, console, "reproduction 1/1")
    out = console.export_text()
    assert out.index("software differs: packages.librdkafka") < out.index("fault sequence as executed")
