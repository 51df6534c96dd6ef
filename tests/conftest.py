"""Shared fixtures: a real Kafka cluster in real containers.

One 3-node cluster per test session (per xdist worker: only the worker that runs
the cluster group starts one), named after the pid so concurrent sessions never
collide; tests that break it must repair it.
"""
from __future__ import annotations

import os
import uuid

import pytest


def pytest_configure(config):
    os.environ.setdefault("KCHAOS_LOG_LEVEL", "WARNING")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """The cluster tests are one pytest-xdist group: ``./run-tests`` runs them one
    after another on one worker (one cluster at a time on this machine's two cores:
    whole runs are timing-sensitive and share Docker), and everything else beside
    them on the other worker."""
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("cluster"))


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
