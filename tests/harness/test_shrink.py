"""kchaos shrink's search (harness/shrink.py) on planned schedules, with the
"still fails" answer given by a rule over the candidate's plan; the runs
themselves are real clusters only in the shrink measurement (docs/findings.md)."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import tomli_w

from harness import schedule
from harness.run_config import RunConfig, load, validate
from harness.shrink import failing_share, shrink, units_of, with_units
from harness.shrink_cli import _without_none
from tests.harness.config_refusals import refused_by_validate

ROOT = Path(__file__).resolve().parents[2]


def mixed() -> RunConfig:
    cfg = load(ROOT / "examples" / "unclean-election.toml")
    cfg.nemesis.faults = ["unclean-election,partition,kill,pause"]
    cfg.seed = 3
    return cfg


def test_units_pair_starts_with_stops_and_keep_scenario_cycles_whole():
    cfg = mixed()
    units = units_of(cfg)
    assert sum(len(u.steps) for u in units) == len(schedule.fault_plan(cfg))
    scenario = [u for u in units if u.scenario]
    assert scenario and all(len(u.steps) == 6 and u.package == "unclean-election" for u in scenario)
    for u in units:
        if not u.scenario:
            assert len(u.steps) == 2 and u.steps[0][0] < u.steps[1][0]
    # an explicit plan keeps its units
    again = units_of(with_units(cfg, units))
    assert [(u.package, u.scenario, u.steps) for u in again] == [(u.package, u.scenario, u.steps) for u in units]
    assert schedule.fault_plan(with_units(cfg, units)) == schedule.fault_plan(cfg)


def test_a_failure_made_by_the_scenario_shrinks_to_one_cycle_and_a_short_workload():
    cfg = mixed()
    tried = []

    def still_fails(candidate: RunConfig, change: str) -> bool:
        tried.append(change)
        return any(u.scenario for u in units_of(candidate)) if candidate.nemesis.faults else False

    result = shrink(cfg, still_fails)
    assert len(result.smallest.nemesis.steps) == 6            # one unclean-election cycle
    assert result.smallest.time_limit < cfg.time_limit / 2
    assert result.smallest.rate < cfg.rate and result.smallest.concurrency < cfg.concurrency
    assert tried[0].startswith("drop every package fault") and not result.out_of_budget
    validate(result.smallest)                                 # the shrunk config is a valid run config


def test_a_failure_needing_one_kill_keeps_exactly_that_kill():
    cfg = mixed()
    cfg.nemesis.faults = ["partition,kill,pause"]
    needed = next(u for u in units_of(cfg) if u.package == "kill")
    kill_value = needed.steps[0][1]["value"]

    def still_fails(candidate: RunConfig, change: str) -> bool:
        return any(s["f"] == "kill" and s["value"] == kill_value for s in candidate.nemesis.steps)

    result = shrink(cfg, still_fails)
    assert [s["f"] for s in result.smallest.nemesis.steps] == ["kill", "start"]
    kept = [a for a in result.path if a.failed]
    assert kept and all(a.steps >= 2 for a in kept)


def test_nothing_failing_keeps_the_original_and_an_empty_plan_means_no_faults():
    cfg = mixed()
    result = shrink(cfg, lambda candidate, change: False)
    assert len(result.smallest.nemesis.steps) == len(schedule.fault_plan(cfg))
    assert not any(a.failed for a in result.path)
    empty = with_units(cfg, [])
    assert empty.nemesis.faults == [] and schedule.fault_plan(empty) == []


def test_the_budget_stops_the_search_with_the_best_so_far():
    calls = []
    result = shrink(mixed(), lambda c, ch: calls.append(ch) or True, over_budget=lambda: len(calls) >= 2)
    assert result.out_of_budget and len(result.path) == 2


def test_the_shrunk_scenario_round_trips_through_toml(tmp_path):
    cfg = mixed()
    smallest = with_units(cfg, units_of(cfg)[:2])
    path = tmp_path / "shrunk.toml"
    path.write_text(tomli_w.dumps(_without_none(smallest.to_json())))
    back = load(path)
    assert schedule.fault_plan(back) == schedule.fault_plan(smallest)
    assert tomllib.loads(path.read_text())["nemesis"]["steps"][0]["unit"] == 0


def test_explicit_steps_are_validated(tmp_path):
    base = 'time_limit = 30\n[nemesis]\nfaults = ["kill"]\n'
    line = refused_by_validate(tmp_path, base + 'steps = [{at = 5, f = "pause", value = {fault = "pause"}}]\n')
    assert "nemesis.steps[1].f 'pause'" in line and "kill" in line
    line = refused_by_validate(tmp_path, base + 'steps = [{at = 31, f = "kill"}]\n')
    assert "nemesis.steps[1].at" in line
    line = refused_by_validate(tmp_path, '[nemesis]\nsteps = [{at = 1, f = "kill"}]\n')
    assert "needs nemesis.faults" in line


def test_failing_share():
    assert failing_share([{"lost-write"}, set()], {"lost-write"}) == 0.5
    assert failing_share([], {"lost-write"}) == 0.0


def _run_folder(tmp_path: Path, results: dict) -> Path:
    run = tmp_path / "store" / "x" / "20260101T000000"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"name": "x", "seed": 1, "nemesis": {"faults": ["kill"]}}))
    (run / "history.jsonl").write_text(json.dumps({"index": 0, "time": 1, "process": 0, "type": "invoke",
                                                   "f": "assign", "value": [0]}) + "\n")
    (run / "results.json").write_text(json.dumps(results))
    return run


def test_shrink_of_a_valid_run_or_a_folder_without_history_is_one_line_and_64(tmp_path):
    valid = _run_folder(tmp_path, {"valid": True, "anomalies": {}})
    for folder in (valid, tmp_path / "nowhere", tmp_path):
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "shrink", str(folder)],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 64, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "store" / "shrink").exists()
