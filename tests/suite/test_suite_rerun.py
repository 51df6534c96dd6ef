"""`kchaos suite --rerun-failed`: which runs are rerun, with what, how the
reruns are recorded, and how the index marks flaky cells (fake runner, no cluster)."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from harness.suite import SuiteRerun, SuiteRun
from harness.suite_config import expand, parse
from reports.suite_report import is_flaky

from .fakes import FakeClock, FakeRunner
from .test_suite_reports import Index


@pytest.mark.parametrize("outcome, reruns, flaky", [
    ("invalid", [], False),
    ("invalid", ["invalid"], False),
    ("invalid", ["valid"], True),
    ("unknown", ["unknown", "invalid"], True),
    ("unknown", ["error", "interrupted"], False),     # no verdict: decides nothing
    ("valid", ["invalid"], True),
    ("error", ["valid"], False),                      # the original reached no verdict
])
def test_is_flaky(outcome, reruns, flaky):
    assert is_flaky({"outcome": outcome, "reruns": [{"outcome": o} for o in reruns]}) is flaky


def first_suite(tmp_path, clock):
    s = parse({"name": "rr", "base": {"time_limit": 5}, "matrix": {"seeds": [1, 2, 3, 4]}})
    runner = FakeRunner({"rr-s2": "invalid", "rr-s3": "unknown", "rr-s4": "error"}, clock)
    return SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=runner, clock=clock).execute()[0]


def test_rerun_failed_reruns_invalid_and_unknown_with_their_seeds_and_marks_flaky(tmp_path):
    clock = FakeClock()
    suite_dir = first_suite(tmp_path, clock)
    runner = FakeRunner({"rr-s2": "valid", "rr-s3": "unknown"}, clock)
    lines: list[str] = []
    seeds = []
    rerun = SuiteRerun(suite_dir, runner=lambda cfg, progress: (seeds.append(cfg.seed), runner(cfg, progress))[1],
                       clock=clock, announce=lines.append)
    code = rerun.execute()
    assert runner.calls == ["rr-s2", "rr-s3"] and seeds == [2, 3]   # not the valid one, not the harness error
    assert code == 2                                                 # the worst rerun: unknown
    doc = json.loads((suite_dir / "suite.json").read_text())
    runs = doc["runs"]
    assert [r["outcome"] for r in runs] == ["valid", "invalid", "unknown", "error"]   # originals kept
    assert [[x["outcome"] for x in r.get("reruns", [])] for r in runs] == [[], ["valid"], ["unknown"], []]
    assert [r.get("flaky", False) for r in runs] == [False, True, False, False]
    assert doc["flaky"] == 1
    again = runs[1]["reruns"][0]
    assert again["seed"] == 2 and (suite_dir / again["report"]).is_file() and again["report"] != runs[1]["report"]
    assert any("flaky" in line for line in lines) and any("[rerun 2/2]" in line for line in lines)

    idx = Index((suite_dir / "index.html").read_text())
    html = (suite_dir / "index.html").read_text()
    assert 'data-flaky="true"' in html and html.count('data-flaky="true"') == 1
    assert "1 flaky" in html
    current = {r["cell"][-6:]: r["trend"][-1] for r in idx.rows}
    assert current["seed=2"][0] == "invalid"          # the original's outcome, marked flaky
    assert 't-invalid t-current t-flaky' in html
    row2 = html.split('data-cell="kafka=4.3.1 variant=base nemesis=none seed=2"')[1].split("</tr>")[0]
    assert 'class="rerun-report"' in row2 and "o-flaky" in row2
    props = {p.get("name"): p.get("value") for ts in ET.parse(suite_dir / "junit.xml").getroot()
             if ts.get("name") == "rr-s2" for p in ts.iter("property")}
    assert props["flaky"] == "true" and props["reruns"] == "valid"

    # the next suite run's trend shows the flaky cell of this one
    later = first_suite(tmp_path, clock)
    later_html = (later / "index.html").read_text()
    row2 = later_html.split('data-cell="kafka=4.3.1 variant=base nemesis=none seed=2"')[1].split("</tr>")[0]
    assert "t-invalid t-flaky" in row2 and "flaky: rerun valid" in row2


def test_rerun_of_a_suite_without_failures_runs_nothing(tmp_path):
    clock = FakeClock()
    s = parse({"name": "ok", "base": {"time_limit": 5}, "matrix": {"seeds": [1]}})
    suite_dir, _ = SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=FakeRunner({}, clock),
                            clock=clock).execute()
    runner = FakeRunner({}, clock)
    assert SuiteRerun(suite_dir, runner=runner, clock=clock).execute() == 0 and runner.calls == []


def test_cli_rerun_failed_usage_errors_and_dry_run(tmp_path):
    clock = FakeClock()
    suite_dir = first_suite(tmp_path, clock)
    def kchaos(*args):
        return subprocess.run([sys.executable, "-m", "harness.cli", "suite", *args],
                              capture_output=True, text=True, timeout=120)
    for args in (["--rerun-failed", str(tmp_path / "nope")], ["--rerun-failed", str(suite_dir), "x.toml"], []):
        p = kchaos(*args)
        assert p.returncode == 64 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    p = kchaos("--rerun-failed", str(suite_dir), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert [line.split()[1] for line in p.stdout.strip().splitlines()] == ["rr-s2", "rr-s3"]
    assert "seed 2" in p.stdout
