"""Fixtures for the nemesis tests on a real cluster.

``nem_cluster`` is the session's ``kafka_cluster``; for quick iterations set
KCHAOS_NEMESIS_CLUSTER=<name> to reuse a cluster left up by
``kchaos cluster up --name <name>`` instead.
"""
from __future__ import annotations

import os
import random
import pytest


@pytest.fixture(scope="session")
def nem_cluster(request):
    name = os.environ.get("KCHAOS_NEMESIS_CLUSTER")
    if name:
        from harness.run_cluster import cluster_attach
        return cluster_attach(name)
    return request.getfixturevalue("kafka_cluster")


def heal(cluster) -> None:
    from nemesis.packages import heal_all
    report = heal_all(cluster.kafka, restart_dead=True)
    cluster.kafka.wait_ready(180)
    assert all(s in ("ok", "restarted") for s in report.values()), report


@pytest.fixture
def healed(nem_cluster):
    """The cluster, healed of every fault after the test (even a failed one)."""
    yield nem_cluster
    heal(nem_cluster)


@pytest.fixture
def ctx(nem_cluster, topic_name):
    """A nemesis context on a fresh topic name; heals everything and deletes
    the topic after the test."""
    from nemesis.protocol import NemesisContext
    yield NemesisContext(nem_cluster.kafka, topic_name, random.Random(1234))
    heal(nem_cluster)
    try:
        nem_cluster.kafka.admin().delete_topics([topic_name], operation_timeout=30)[topic_name].result(60)
    except Exception:
        pass  # the topic was never created, or deletion is slow: harmless
