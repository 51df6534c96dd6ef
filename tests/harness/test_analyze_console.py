"""The Spark driver JVM's start-up warnings stay off the console (issue 33):
``kchaos analyze`` on a stored history prints no "Using incubator modules"
line, which goes to the run's kchaos.log instead; a JVM that cannot start
still says why on stderr."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from checkers.session import _pump_stderr

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "reports" / "fixtures" / "valid"


def test_analyze_keeps_the_jvm_warning_in_kchaos_log(tmp_path) -> None:
    run_dir = tmp_path / "valid"
    shutil.copytree(FIXTURE, run_dir)
    p = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(run_dir), "--engine", "spark"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "verdict: valid" in p.stdout
    console = p.stdout + p.stderr
    assert "Using incubator modules" not in console, console
    logged = (run_dir / "kchaos.log").read_text()
    assert "Spark driver JVM: WARNING: Using incubator modules" in logged, logged


def test_a_driver_jvm_that_cannot_start_says_why() -> None:
    code = ("from checkers.session import new_session\n"
            "new_session(conf={'spark.driver.memory': '1k'})\n")      # the JVM refuses a 1 KiB heap
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "KCHAOS_SPARK_CDS": "0"})
    assert p.returncode != 0
    assert "JAVA_GATEWAY_EXITED" in p.stderr, p.stderr
    # the JVM's own words (HotSpot prints start-up failures on stdout, which stays inherited)
    assert "Error occurred during initialization of VM" in p.stdout + p.stderr, (p.stdout, p.stderr)


def test_jvm_warnings_are_logged_and_other_lines_stay_on_stderr(caplog, capsys) -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                       b"12:00:01 ERROR SparkContext: something real\n")
    os.close(write_fd)
    with caplog.at_level(logging.INFO, logger="checkers.session"):
        _pump_stderr(read_fd)
    assert [r.getMessage() for r in caplog.records] == [
        "Spark driver JVM: WARNING: Using incubator modules: jdk.incubator.vector"]
    assert caplog.records[0].levelno == logging.INFO
    assert capsys.readouterr().err == "12:00:01 ERROR SparkContext: something real\n"
