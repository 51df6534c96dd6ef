"""Whole runs on real clusters: what was acknowledged is read back; interrupts clean up."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from history.ops import read_history

pytestmark = pytest.mark.cluster


def run_containers(pid: int, cluster_prefix: str = "") -> list:
    """Containers a run made: labelled with the pid of the process that ran it
    (and, within this test process, whose cluster name has the run's prefix:
    the session's shared cluster carries the same pid)."""
    from infra.engine import docker_client
    found = docker_client().containers.list(all=True, filters={"label": f"kchaos.pid={pid}"}, ignore_removed=True)
    return [c for c in found if c.labels.get("kchaos.cluster", "").startswith(cluster_prefix)]


def run_networks(pid: int) -> list:
    from infra.engine import docker_client
    return docker_client().networks.list(filters={"label": f"kchaos.pid={pid}"})


def test_fault_free_run_reads_back_every_acknowledged_send(tmp_path):
    from harness.run_config import RunConfig
    from harness.runner import Runner
    cfg = RunConfig(name="nofault", seed=1234, time_limit=30, store=str(tmp_path))
    outcome = Runner(cfg).execute()
    run_dir = outcome.run_dir
    ops = list(read_history(run_dir / "history.jsonl"))
    client_ops = [o for o in ops if isinstance(o["process"], int) and o["type"] != "invoke"]
    # Enough operations for the read-back below to mean something; the rate
    # itself is a figure for bench/workload_overhead.py, not an assertion here.
    assert len(client_ops) >= 300, f"only {len(client_ops)} ops in 30s"

    drained: dict[tuple[int, int], int] = {}
    for o in ops:
        if o["f"] == "poll" and o.get("drain") and o["type"] == "ok":
            for p, pairs in o["value"].items():
                for offset, value in pairs:
                    drained[(int(p), offset)] = value
    acked = [(p, v, off) for o in ops if o["f"] == "send" and o["type"] == "ok" for p, v, off in o["value"]]
    assert len(acked) >= 150
    missing = [(p, v, off) for p, v, off in acked if drained.get((p, off)) != v]
    assert not missing, f"{len(missing)} acknowledged sends not in the drain at their offset: {missing[:5]}"
    failed = {(p, v) for o in ops if o["f"] == "send" and o["type"] == "fail" for p, v, _ in o["value"]}
    assert not failed & {(p, v) for (p, _), v in drained.items()}

    results = json.loads((run_dir / "results.json").read_text())
    assert outcome.exit_code == 0 and results["valid"] is True
    for name in ("config.json", "history.parquet", "report.html", "junit.xml", "kchaos.log"):
        assert (run_dir / name).exists(), name
    assert {p.name for p in (run_dir / "nodes").iterdir()} == {"n1", "n2", "n3"}
    assert json.loads((run_dir / "config.json").read_text())["seed"] == 1234
    assert (tmp_path / "latest").resolve() == run_dir.resolve()
    assert run_containers(os.getpid(), "nofault-") == []


def start_run(tmp_path: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--time-limit", "300",
                             "--nemesis", "partition,kill", "--nemesis-interval", "3",
                             "--store", str(tmp_path), "--name", "interrupted", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_ops(tmp_path: Path, proc: subprocess.Popen, n: int, timeout_s: float = 240) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        hist = list(tmp_path.glob("interrupted/*/history.jsonl"))
        if hist and sum(1 for _ in open(hist[0])) >= n:
            return hist[0]
        time.sleep(0.5)
    raise AssertionError("the run never got going")


def test_sigint_heals_tears_down_and_leaves_a_readable_history(tmp_path):
    proc = start_run(tmp_path)
    try:
        history = wait_for_ops(tmp_path, proc, 300)
        assert run_containers(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    assert run_containers(proc.pid) == [] and run_networks(proc.pid) == []
    ops = list(read_history(history))
    open_invokes: dict = {}
    for o in ops:
        if o["type"] == "invoke":
            open_invokes[o["process"]] = o
        else:
            open_invokes.pop(o["process"], None)
    assert not open_invokes, "every invocation has a completion after an interrupt"
    assert (history.parent / "nodes").is_dir()


def test_sigkilled_run_is_swept_by_the_next_run_and_by_clean(tmp_path):
    proc = start_run(tmp_path)
    try:
        history = wait_for_ops(tmp_path, proc, 100)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert run_containers(proc.pid), "a SIGKILLed run leaves its containers"
    list(read_history(history))  # readable as it was left
    cluster = run_containers(proc.pid)[0].labels["kchaos.cluster"]
    from harness.run_cluster import sweep_dead_runs
    sweep_dead_runs()  # what the next `kchaos run` does first
    assert run_containers(proc.pid) == [] and run_networks(proc.pid) == []
    clean = subprocess.run([sys.executable, "-m", "harness.cli", "clean", "--name", cluster],
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0
