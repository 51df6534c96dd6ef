"""Suite files: parsing, matrix expansion, validation, the time budget, the run loop."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.suite import Budget, SuiteRun, exit_code_of
from harness.suite_config import expand, load, parse
from infra.errors import UsageError

from .fakes import FakeClock, FakeRunner

BASE = {"time_limit": 10, "nodes": 3, "topic": {"min.insync.replicas": 2, "retention.ms": 1000},
        "producer": {"acks": "all", "linger.ms": 5}}


def suite(**matrix) -> dict:
    return {"name": "ns", "base": json.loads(json.dumps(BASE)), "matrix": matrix}


def test_cross_product_order_names_and_cells():
    data = suite(kafka_version=["4.3.1", "4.1.1"], nemesis=[["partition"], ["kill", "pause"], "none"],
                 seeds=[1, 2],
                 variant=[{"name": "safe"}, {"name": "unsafe", "producer": {"acks": "1", "enable.idempotence": False},
                                             "topic": {"min.insync.replicas": 1},
                                             "broker": {"unclean.leader.election.enable": True}}])
    runs = expand(parse(data))
    assert len(runs) == 2 * 2 * 3 * 2
    assert [r.index for r in runs] == list(range(1, 25))
    first, last = runs[0], runs[-1]
    assert first.axes == {"kafka_version": "4.3.1", "variant": "safe", "nemesis": ["partition"], "seed": 1}
    assert first.cell == "kafka=4.3.1 variant=safe nemesis=partition seed=1"
    assert first.name == "ns-4.3.1-safe-partition-s1"
    assert last.cell == "kafka=4.1.1 variant=unsafe nemesis=none seed=2"
    assert last.name == "ns-4.1.1-unsafe-none-s2"
    assert runs[2].axes["nemesis"] == ["kill", "pause"] and runs[2].name.endswith("kill_pause-s1")
    assert len({r.cell for r in runs}) == 24 and len({r.name for r in runs}) == 24
    # variant tables merge into the base's key by key; other keys stay the base's
    unsafe = last.config
    assert unsafe.producer == {"acks": "1", "enable.idempotence": False, "linger.ms": 5}
    assert unsafe.topic == {"min.insync.replicas": 1, "retention.ms": 1000}
    assert unsafe.broker == {"unclean.leader.election.enable": True}
    assert first.config.producer == {"acks": "all", "linger.ms": 5} and first.config.broker == {}
    assert unsafe.kafka_version == "4.1.1" and unsafe.seed == 2 and unsafe.nemesis.faults == []
    assert unsafe.time_limit == 10.0


def test_single_cell_axes_stay_out_of_the_run_name_but_not_the_cell():
    runs = expand(parse(suite(seeds=[5])), store="/tmp/st")
    assert len(runs) == 1 and runs[0].name == "ns"
    assert runs[0].cell == "kafka=4.3.1 variant=base nemesis=none seed=5"
    assert runs[0].config.store == "/tmp/st" and runs[0].config.seed == 5


def test_repeat_uses_the_base_seed_or_draws_one_per_run():
    drawn = expand(parse(suite(repeat=3)))
    assert [r.axes["repeat"] for r in drawn] == [1, 2, 3]
    assert [r.name for r in drawn] == ["ns-r1", "ns-r2", "ns-r3"]
    assert all(r.config.seed is None for r in drawn)  # the runner draws and stores one each
    data = suite(repeat=2)
    data["base"]["seed"] = 42
    assert [r.config.seed for r in expand(parse(data))] == [42, 42]
    assert len(expand(parse(suite()))) == 1  # neither seeds nor repeat: one run


def test_nemesis_axis_and_base_nemesis():
    runs = expand(parse(suite(nemesis=["partition,kill", ["PAUSE"], []])))
    assert [r.axes["nemesis"] for r in runs] == [["partition", "kill"], ["pause"], []]
    data = suite()
    data["base"]["nemesis"] = {"faults": ["kill"], "interval": 3}
    (r,) = expand(parse(data))
    assert r.config.nemesis.faults == ["kill"] and r.config.nemesis.interval == 3.0
    assert "nemesis=kill" in r.cell


def test_suite_options():
    s = parse({"name": "x", "time_budget": 600, "run_overhead": 30, "trend": 3, "description": "d"})
    assert (s.time_budget, s.run_overhead, s.trend, s.description) == (600.0, 30.0, 3, "d")
    assert parse({"name": "x"}).time_budget is None


@pytest.mark.parametrize("data, needle", [
    ({}, "needs a name"),
    ({"name": "Bad Name"}, "must be 1-40 lowercase"),
    ({"name": "x", "bogus": 1}, "unknown key 'bogus'; valid keys: name, description"),
    ({"name": "x", "time_budget": 0}, "time_budget must be positive"),
    ({"name": "x", "time_budget": "1h"}, "time_budget must be a number"),
    ({"name": "x", "trend": 1.5}, "trend must be an integer"),
    ({"name": "x", "base": {"nodes": "three"}}, "[base]: nodes must be a number"),
    ({"name": "x", "base": {"bogus": 1}}, "[base]: unknown key 'bogus'"),
    ({"name": "x", "base": {"name": "y"}}, "'name' cannot be set in a suite"),
    ({"name": "x", "base": {"keep_cluster": True}}, "'keep_cluster' cannot be set"),
    ({"name": "x", "matrix": {"seed": [1]}}, "unknown key matrix.'seed'; valid keys: kafka_version"),
    ({"name": "x", "matrix": {"kafka_version": []}}, "matrix.kafka_version must be a non-empty list"),
    ({"name": "x", "matrix": {"kafka_version": ["4.x"]}}, "is not a version number"),
    ({"name": "x", "matrix": {"kafka_version": ["4.3.1", "4.3.1"]}}, "lists a version twice"),
    ({"name": "x", "matrix": {"nemesis": [["partition"], ["teleport"]]}}, "matrix.nemesis[1]: unknown fault package 'teleport'"),
    ({"name": "x", "matrix": {"nemesis": [["kill"], "kill"]}}, "same fault set twice"),
    ({"name": "x", "matrix": {"nemesis": [3]}}, "must be a list of fault names"),
    ({"name": "x", "matrix": {"seeds": [1], "repeat": 2}}, "seeds and matrix.repeat exclude each other"),
    ({"name": "x", "matrix": {"seeds": [1, 1]}}, "lists a seed twice"),
    ({"name": "x", "matrix": {"seeds": ["a"]}}, "seeds entry must be an integer"),
    ({"name": "x", "matrix": {"repeat": 0}}, "matrix.repeat must be at least 1"),
    ({"name": "x", "base": {"seed": 1}, "matrix": {"seeds": [2]}}, "base.seed and matrix.seeds exclude"),
    ({"name": "x", "matrix": {"variant": {"name": "a"}}}, "one or more [[matrix.variant]] tables"),
    ({"name": "x", "matrix": {"variant": [{"producer": {}}]}}, "matrix.variant[0] needs a name"),
    ({"name": "x", "matrix": {"variant": [{"name": "a"}, {"name": "a"}]}}, "'a' is used twice"),
    ({"name": "x", "matrix": {"variant": [{"name": "a", "bogus": {}}]}}, "variant 'a': unknown key 'bogus'"),
    ({"name": "x", "matrix": {"variant": [{"name": "a", "producer": 1}]}}, "[producer] must be a table"),
    ({"name": "x", "matrix": {"variant": [{"name": "a", "seed": 3}]}}, "'seed' belongs in [base]"),
    ({"name": "x", "matrix": {"variant": [{"name": "a", "store": "/s"}]}}, "'store' belongs in [base]"),
    ({"name": "latest"}, "is reserved"),
])
def test_validation_errors_are_one_line(data, needle):
    with pytest.raises(UsageError) as info:
        parse(data, "s.toml")
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and msg.startswith("s.toml")


def test_run_config_errors_surface_at_expansion_with_the_cell():
    data = suite(variant=[{"name": "ok"}, {"name": "rf", "workload": {"replication_factor": 5}}])
    with pytest.raises(UsageError) as info:
        expand(parse(data, "s.toml"))
    assert "variant=rf" in str(info.value) and "replication factor 5" in str(info.value)


def test_cli_usage_errors_exit_64_with_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[matrix]\nkafka_version = "4.3.1"\n')
    broken = tmp_path / "broken.toml"
    broken.write_text('name = "x"\n[matrix\n')
    for args in (["suite", str(bad)], ["suite", str(broken)], ["suite", str(tmp_path / "nope.toml")],
                 ["reproduce", str(tmp_path / "nope")], ["reproduce", str(tmp_path)],
                 ["reproduce", str(tmp_path), "--times", "0"]):
        p = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 64, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


def test_example_nightly_suite_expands(tmp_path):
    from pathlib import Path
    s = load(Path(__file__).resolve().parents[2] / "examples" / "suites" / "nightly.toml")
    runs = expand(s)
    assert s.name == "nightly" and s.time_budget and len(runs) == 16
    p = subprocess.run([sys.executable, "-m", "harness.cli", "suite", "examples/suites/nightly.toml", "--dry-run"],
                       capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0 and len(p.stdout.strip().splitlines()) == 16


# ---- the time budget -----------------------------------------------------------

def test_budget_skips_what_does_not_fit_and_learns_the_overhead():
    b = Budget(None)
    assert b.admit(1e9, 60) == (True, None)
    b = Budget(300, default_overhead=100)
    assert b.estimate(60) == 160
    assert b.admit(0, 60)[0] and b.admit(140, 60)[0]
    ok, why = b.admit(141, 60)
    assert not ok and "160 s needed, 159 s of 300 s left" in why
    assert b.admit(141, 50)[0]  # a shorter run may still fit
    b.record(80, 60)  # measured overhead 20 s
    b.record(100, 60)  # 40 s
    assert b.overhead() == 30 and b.admit(200, 60)[0] and not b.admit(211, 60)[0]
    b.record(10, 60)  # faster than its time limit (interrupted early): overhead 0, not negative
    assert b.overhead() == 20
    assert "0 s of" in Budget(10, 5).admit(20, 60)[1]  # overrun: nothing left, not negative


def test_exit_code_is_the_worst_run():
    r = lambda *o: [{"outcome": x} for x in o]  # noqa: E731
    assert exit_code_of(r("valid", "valid", "skipped")) == 0
    assert exit_code_of(r("valid", "invalid")) == 1
    assert exit_code_of(r("invalid", "unknown")) == 2
    assert exit_code_of(r("unknown", "error", "invalid")) == 3
    assert exit_code_of(r("skipped", "skipped")) == 2  # nothing ran: no verdict
    assert exit_code_of([]) == 0
    assert exit_code_of(r("valid"), interrupted=True) == 130


# ---- the run loop with a fake runner ---------------------------------------------

def test_loop_keeps_going_after_a_failed_run_and_skips_what_the_budget_cannot_fit(tmp_path):
    data = suite(seeds=[1, 2, 3, 4, 5])
    data["time_budget"], data["run_overhead"] = 450, 50
    s = parse(data)
    clock = FakeClock()
    runner = FakeRunner({"ns-s1": "error", "ns-s2": "invalid"}, clock, seconds=100)
    lines = []
    suite_dir, code = SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=runner, clock=clock,
                               announce=lines.append).execute()
    # each run: 10 s limit + measured 90 s overhead = 100 s: four fit in 450 s, the fifth does not
    assert runner.calls == ["ns-s1", "ns-s2", "ns-s3", "ns-s4"]
    assert code == 3
    assert suite_dir.parent == tmp_path / "suites" / "ns"
    assert (tmp_path / "suites" / "ns" / "latest").resolve() == suite_dir.resolve()
    doc = json.loads((suite_dir / "suite.json").read_text())
    assert doc["status"] == "finished" and doc["exit_code"] == 3
    assert [r["outcome"] for r in doc["runs"]] == ["error", "invalid", "valid", "valid", "skipped"]
    assert doc["counts"] == {"error": 1, "invalid": 1, "valid": 2, "skipped": 1}
    assert "time budget" in doc["runs"][4]["skip_reason"] and doc["runs"][4]["run_dir"] is None
    assert doc["runs"][0]["error"].startswith("ClusterError")
    assert doc["runs"][1]["anomalies"] == {"lost-write": {"count": 3, "allowed": False},
                                           "inconsistent-offset": {"count": 1, "allowed": False}}
    for r in doc["runs"][:4]:
        assert (suite_dir / r["report"]).is_file() and not r["report"].startswith("/")
    assert (suite_dir / "index.html").is_file() and (suite_dir / "junit.xml").is_file()
    assert any("skipped" in line for line in lines)
    assert not (tmp_path / "latest").resolve().is_relative_to(tmp_path / "suites")


def test_loop_stops_on_interrupt(tmp_path):
    s = parse(suite(seeds=[1, 2, 3]))
    clock = FakeClock()
    runner = FakeRunner({"ns-s2": "interrupted"}, clock)
    suite_dir, code = SuiteRun(s, expand(s, str(tmp_path)), tmp_path, runner=runner, clock=clock).execute()
    assert code == 130 and runner.calls == ["ns-s1", "ns-s2"]
    doc = json.loads((suite_dir / "suite.json").read_text())
    assert doc["status"] == "interrupted"
    assert [r["outcome"] for r in doc["runs"]] == ["valid", "interrupted", "skipped"]


# ---- --dry-run checks the Kafka versions resolve ------------------------------------

def _fake_mvn(tmp_path, monkeypatch, missing: str) -> Path:
    """A `mvn` on PATH that finds every Kafka POM but ``missing``'s (as Maven Central
    answers), and logs each version it was asked about. (Versions in kchaos's cache
    are not asked about.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "asked"
    mvn = bin_dir / "mvn"
    mvn.write_text(f"""#!/bin/sh
for a in "$@"; do case "$a" in -Dartifact=*) echo "$a" >> {asked};; esac; done
case "$*" in *:{missing}:pom*)
  echo "[ERROR] Failed to execute goal: org.apache.kafka:kafka_2.13:pom:{missing} was not found in https://repo.maven.apache.org/maven2"
  exit 1;;
esac
exit 0
""")
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return asked


def test_check_available_asks_maven_for_the_pom_only(tmp_path, monkeypatch):
    from infra.distribution import check_available
    from infra.errors import KafkaVersionNotFound
    asked = _fake_mvn(tmp_path, monkeypatch, missing="0.0.1")
    monkeypatch.setenv("KCHAOS_CACHE", str(tmp_path / "cache"))   # nothing cached: mvn is asked
    check_available("4.3.1")
    with pytest.raises(KafkaVersionNotFound, match="Kafka version 0.0.1 does not exist on Maven Central"):
        check_available("0.0.1")
    assert asked.read_text().split() == ["-Dartifact=org.apache.kafka:kafka_2.13:4.3.1:pom",
                                         "-Dartifact=org.apache.kafka:kafka_2.13:0.0.1:pom"]


def test_dry_run_refuses_a_kafka_version_that_does_not_resolve(tmp_path, monkeypatch):
    asked = _fake_mvn(tmp_path, monkeypatch, missing="0.0.1")
    toml = tmp_path / "s.toml"
    toml.write_text('name = "v"\n[base]\ntime_limit = 5\n[matrix]\nkafka_version = ["4.3.1", "0.0.1"]\n'
                    'nemesis = ["none", "partition"]\n')
    p = subprocess.run([sys.executable, "-m", "harness.cli", "suite", str(toml), "--dry-run"],
                       capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 64, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Kafka version 0.0.1 does not exist" in lines[0], p.stderr
    assert "v-0.0.1-none" in lines[0] and "4.3.1-" not in lines[0]
    questions = asked.read_text().split()
    assert "-Dartifact=org.apache.kafka:kafka_2.13:0.0.1:pom" in questions
    assert len(questions) == len(set(questions))        # once a version, not once a run
    toml.write_text(toml.read_text().replace('"0.0.1"', '"4.1.1"'))
    p = subprocess.run([sys.executable, "-m", "harness.cli", "suite", str(toml), "--dry-run"],
                       capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0 and len(p.stdout.strip().splitlines()) == 4, p.stderr
