"""Shared fixtures: a real Kafka cluster in real containers.

One 3-node cluster per test session (per xdist worker: only the worker that runs
the cluster group starts one), named after the pid so concurrent sessions never
collide; tests that break it must repair it.
"""
from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]   # test node ids are relative to it


def pytest_configure(config):
    os.environ.setdefault("KCHAOS_LOG_LEVEL", "WARNING")


@functools.cache
def _needs_a_cluster(path: str) -> bool:
    """Whether a test file marks tests ``cluster`` (read as text: the controller never imports tests)."""
    try:
        return "mark.cluster" in (ROOT / path).read_text()
    except OSError:
        return False


def pytest_xdist_make_scheduler(config, log):
    """``./run-tests`` runs two pytest-xdist workers. Every test of a file that needs
    a cluster is one work unit, so those run one after another on one worker (one
    cluster at a time on this machine's two cores: whole runs are timing-sensitive
    and share Docker), and everything else runs beside them on the other worker.
    (A scheduler of our own: xdist's ``xdist_group`` marks do not group under pytest 9.)"""
    from xdist.scheduler import LoadGroupScheduling   # imported here: only under xdist

    class ClusterApart(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "cluster" if _needs_a_cluster(nodeid.split("::")[0]) else nodeid

    return ClusterApart(config, log)


@pytest.fixture(scope="session")
def kafka_cluster():
    from harness.run_cluster import cluster_down, cluster_up
    name = f"t{os.getpid()}"
    handle = cluster_up(name, nodes=3)
    try:
        yield handle
    finally:
        cluster_down(name)


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def heal_cluster(kafka_cluster):
    """Heal whatever a test did (chains, clocks, paused or killed brokers), and
    wait until every broker is registered again."""
    yield kafka_cluster
    from nemesis.packages import heal_all
    heal_all(kafka_cluster.kafka, restart_dead=True, restart_skewed=True)
    kafka_cluster.kafka.wait_ready(120)
