"""A short fault run at the default verbosity: the console has the progress
lines and no client library line; the run's kchaos.log has the client lines."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

CLIENT_MARKS = ("kchaos.librdkafka", "Connect to", "FAIL [", "GETPID", "py4j")


def test_fault_run_keeps_client_library_lines_off_the_console(tmp_path):
    cfg = tmp_path / "quiet.toml"   # the default run, shorter, checked by the quicker reference engine
    cfg.write_text('name = "quiet"\nseed = 7\n[producer]\nacks = "all"\n"enable.idempotence" = true\n'
                   '[checker]\nengine = "reference"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--config", str(cfg), "--time-limit", "12", "--rate", "60",
         "--concurrency", "3", "--nemesis", "kill", "--nemesis-interval", "4", "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=900)
    console = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), console[-3000:]
    leaked = [line for line in console.splitlines() if any(m in line for m in CLIENT_MARKS)]
    assert not leaked, leaked[:5]
    # the plain (non-terminal) progress: phases and a line per fault step
    for phase in ("image:", "cluster:", "workload:", "final:", "checks:"):
        assert phase in proc.stderr, proc.stderr
    assert "fault started: kill" in proc.stderr, proc.stderr   # seed 7 plans one kill and its restart
    logged = (tmp_path / "quiet" / "latest" / "kchaos.log").read_text()
    assert "kchaos.librdkafka" in logged and any(m in logged for m in ("Connect to", "FAIL [")), logged[-2000:]
