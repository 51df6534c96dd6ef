"""A node rolled from Kafka 3.9.2 onto 4.3.1 on a real cluster of its own
(nemesis/upgrade.py): same data folder, a new version, back in the ISR;
then Kafka's answers to a feature change and to the metadata.version bump."""
from __future__ import annotations

import os
import random

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.long]   # its own 3.9.2 cluster: 27 to 81 s here, with the suite near its budget

FROM, TO = "3.9.2", "4.3.1"


@pytest.fixture(scope="module")
def old_cluster():
    from harness.run_cluster import cluster_down, cluster_up
    name = f"up{os.getpid()}"
    handle = cluster_up(name, nodes=3, kafka_version=FROM)
    try:
        yield handle
    finally:
        cluster_down(name)


def test_upgrade_one_node_then_ask_kafka_for_features(old_cluster):
    from nemesis.protocol import NemesisContext
    from nemesis.upgrade import (FINALIZE_UPGRADE, RESTART_UPGRADED, SET_FEATURE, UPGRADE_NODE,
                                 UpgradeNemesis)
    kafka = old_cluster.kafka
    kafka.create_topic("up", 3, 3, config={"min.insync.replicas": 2})
    nem = UpgradeNemesis()
    nem.setup(NemesisContext(kafka, "up", random.Random(1)))

    stopped = nem.invoke({"f": UPGRADE_NODE, "value": {"fault": "rolling-upgrade", "node": "n2", "version": TO}})["value"]
    assert (stopped["version_before"], stopped["version"], stopped["action"]) == (FROM, TO, "start")
    assert stopped["nodes"] == ["n2"] and not kafka.brokers["n2"].is_running()
    back = nem.invoke({"f": RESTART_UPGRADED, "value": {"fault": "rolling-upgrade", "node": "n2"}})["value"]
    assert back["running_version"] == TO and back["in_isr"] is True and back["action"] == "stop"
    assert kafka.brokers["n1"].logged_version() == FROM

    # A 3.9 cluster knows no transaction.version 2 yet: Kafka refuses, and says so.
    refused = nem.invoke({"f": SET_FEATURE, "value": {"feature": "transaction.version", "level": 2}})["value"]
    assert refused["accepted"] is False and refused["answer"].startswith("exit "), refused
    assert refused["features_before"]["metadata.version"]["finalized"].startswith("3.9"), refused

    # The bump before every node runs the new release: refused too (n1 and n3 support only 3.9).
    early = nem.invoke({"f": FINALIZE_UPGRADE, "value": {"fault": "rolling-upgrade", "version": TO}})["value"]
    assert early["tool_node"] == "n2" and early["accepted"] is False, early
    assert early["features_after"]["metadata.version"]["finalized"].startswith("3.9"), early
