"""A real suite of two short runs, then a reproduction of one of them (real clusters)."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .test_suite_reports import Index

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SUITE = """
name = "it"
description = "two short fault-free runs"

[base]
nodes = 1
time_limit = 10
rate = 50
concurrency = 4
recovery = 1

[base.workload]
partitions = 2
replication_factor = 1

[base.topic]
"min.insync.replicas" = 1

[base.producer]
acks = "all"

[base.checker]
engine = "reference"

[matrix]
nemesis = ["none"]
seeds = [11, 12]
"""


def kchaos(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suite")
    (tmp / "it.toml").write_text(SUITE)
    store = tmp / "store"
    proc = kchaos("suite", str(tmp / "it.toml"), "--store", str(store), timeout=600)
    suite_dir = (store / "suites" / "it" / "latest").resolve()
    return proc, store, suite_dir


def test_suite_of_two_runs_writes_index_junit_and_exit_code(suite_run):
    proc, store, suite_dir = suite_run
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads((suite_dir / "suite.json").read_text())
    assert doc["status"] == "finished" and len(doc["runs"]) == 2
    verdicts = []
    for r in doc["runs"]:
        run_dir = (suite_dir / r["run_dir"]).resolve()
        assert run_dir.parent.parent == store.resolve() and run_dir.parent.name == r["name"]
        results = json.loads((run_dir / "results.json").read_text())
        verdicts.append({True: "valid", False: "invalid"}.get(results["valid"], "unknown"))
        assert r["outcome"] == verdicts[-1]
        assert json.loads((run_dir / "config.json").read_text())["seed"] == r["axes"]["seed"]
    assert [r["name"] for r in doc["runs"]] == ["it-s11", "it-s12"]
    expected = max({"valid": 0, "invalid": 1, "unknown": 2}[v] for v in verdicts)
    assert proc.returncode == expected == doc["exit_code"], proc.stderr[-3000:]

    idx = Index((suite_dir / "index.html").read_text())
    assert len(idx.rows) == 2 and [r["outcome"] for r in idx.rows] == verdicts
    for r in idx.rows:
        assert not r["report"].startswith("/") and (suite_dir / r["report"]).resolve().is_file()
    root = ET.parse(suite_dir / "junit.xml").getroot()
    assert [t.get("name") for t in root.findall("testsuite")] == ["it-s11", "it-s12"]
    assert int(root.get("failures")) == sum(int(t.get("failures")) for t in root.findall("testsuite"))


def test_reproduce_gives_the_same_schedule_and_anomaly_types(suite_run):
    proc, store, suite_dir = suite_run
    doc = json.loads((suite_dir / "suite.json").read_text())
    run_dir = (suite_dir / doc["runs"][0]["run_dir"]).resolve()
    before = {p for p in (store / "it-s11").iterdir() if p.name != "latest"}
    rep = kchaos("reproduce", str(run_dir), "--times", "1", timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr[-3000:]
    line = next(l for l in rep.stdout.splitlines() if l.startswith("reproduction 1/1: ") and "verdict" in l)
    assert "reproduction 1/1: MATCH" in line and "anomaly types same" in line, rep.stdout
    assert "schedule digest identical" in line, rep.stdout
    new = {p for p in (store / "it-s11").iterdir() if p.name != "latest"} - before
    assert len(new) == 1  # stored beside the original, same name and seed
    (new_dir,) = new
    old_cfg = json.loads((run_dir / "config.json").read_text())
    new_cfg = json.loads((new_dir / "config.json").read_text())
    assert new_cfg["seed"] == old_cfg["seed"] == 11
    assert new_cfg["schedule_digest"] == old_cfg["schedule_digest"]
