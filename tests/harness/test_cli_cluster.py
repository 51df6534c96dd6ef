"""`kchaos cluster` and `kchaos clean` as a user runs them: a real subprocess each time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.cluster

KCHAOS = [sys.executable, "-m", "harness.cli"]


def kchaos(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*KCHAOS, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def labelled(cluster: str) -> tuple[list, list]:
    from infra.engine import docker_client
    client = docker_client()
    flt = {"label": f"kchaos.cluster={cluster}"}
    return client.containers.list(all=True, filters=flt, ignore_removed=True), client.networks.list(filters=flt)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_up_status_down_on_kafka_4_0():
    name = f"cli{os.getpid()}"
    try:
        up = kchaos("cluster", "up", "--name", name, "--kafka-version", "4.0.1")
        assert up.returncode == 0, up.stderr
        status = kchaos("cluster", "status", "--name", name)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("running") == 3 and "active" in status.stdout
    finally:
        down = kchaos("cluster", "down", "--name", name)
    assert down.returncode == 0 and "removed 3 containers and 1 networks" in down.stdout, down.stdout
    assert labelled(name) == ([], [])
    gone = kchaos("cluster", "status", "--name", name)
    assert_one_line_error(gone, 64, "no kchaos cluster named")


def _sigkill_during_up(name: str) -> None:
    proc = subprocess.Popen([*KCHAOS, "cluster", "up", "--name", name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not labelled(name)[0]:
        assert proc.poll() is None, "cluster up ended before it made containers"
        assert time.monotonic() < deadline, "cluster up never made containers"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert labelled(name)[0], "expected leftovers after SIGKILL"


def test_clean_removes_what_a_killed_cluster_up_left():
    name = f"kill{os.getpid()}"
    _sigkill_during_up(name)
    clean = kchaos("clean", "--name", name)
    assert clean.returncode == 0, clean.stderr
    assert labelled(name) == ([], [])


def test_next_run_sweeps_a_killed_cluster_up_but_spares_live_ones(kafka_cluster):
    from harness.run_cluster import sweep_dead_runs
    name = f"sweep{os.getpid()}"
    _sigkill_during_up(name)
    sweep_dead_runs()
    assert labelled(name) == ([], [])
    assert len(labelled(kafka_cluster.name)[0]) == 3  # owned by this live test process


def test_unknown_kafka_version():
    assert_one_line_error(kchaos("cluster", "up", "--name", "bad", "--kafka-version", "4.9.99"),
                          64, "4.9.99", "does not resolve")


@pytest.mark.parametrize("nodes", ["0", "8", "-1", "three"])
def test_invalid_node_count(nodes):
    assert_one_line_error(kchaos("cluster", "up", "--name", "bad", "--nodes", nodes), 64)


def test_malformed_broker_property():
    assert_one_line_error(kchaos("cluster", "up", "--name", "bad", "--broker-prop", "novalue"), 64, "KEY=VALUE")


def test_no_docker_engine_and_none_can_be_started():
    proc = kchaos("cluster", "up", "--name", "bad", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert_one_line_error(proc, 3, "no Docker engine answers")


def test_broker_that_never_becomes_ready_shows_its_log_tail():
    name = f"broken{os.getpid()}"
    proc = kchaos("cluster", "up", "--name", name, "--nodes", "1", "--broker-prop", "num.io.threads=notanumber")
    assert_one_line_error(proc, 3, "n1", "num.io.threads")
    assert labelled(name) == ([], [])  # a failed bring-up removes what it made
