"""A dynamic KRaft quorum (KIP-853) on real containers: three controllers
formatted with --initial-controllers beside one broker; the active controller
removed with kafka-metadata-quorum and put back, the voter set read with
describe --status at each step. Its own cluster (no shared fixture has a
dynamic quorum); no workload, about a minute."""
from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.cluster


def test_the_active_controller_is_removed_and_added_back():
    from broker.lifecycle import BrokerSettings
    from broker.quorum_tool import controller_bootstrap, describe, parse_replication
    from harness.run_cluster import cluster_down, cluster_up
    from nemesis.protocol import NemesisContext
    from nemesis.quorum import ADD_CONTROLLER, QUORUM_CHANGES, REMOVE_CONTROLLER, QuorumNemesis, quorum_status, \
        voter_ids
    handle = cluster_up("kchaos-dynq", nodes=1, controllers=3, settings=BrokerSettings(quorum="dynamic"))
    try:
        kafka = handle.kafka
        assert "controller.quorum.bootstrap.servers" in kafka.nodes[-1].run(
            ["cat", "/etc/kafka/server.properties"]).out
        before, _ = quorum_status(kafka)
        assert voter_ids(before) == [2, 3, 4], before
        nem = QuorumNemesis()
        nem.setup(NemesisContext(kafka, None, random.Random(1)))
        removed = nem.invoke({"f": REMOVE_CONTROLLER, "value": {"fault": QUORUM_CHANGES,
                                                                "target": "active-controller"}})["value"]
        leader = before["leader_id"]
        assert removed["controller"] == f"n{leader}" and removed["was_leader"], removed
        assert "errors" not in removed and "Removed" in removed["answer"], removed
        assert leader not in removed["voters_after"] and len(removed["voters_after"]) == 2, removed
        added = nem.invoke({"f": ADD_CONTROLLER, "value": {"fault": QUORUM_CHANGES}})["value"]
        assert "errors" not in added, added
        assert added["voters_after"] == [2, 3, 4], added
        rows = parse_replication(describe(kafka.controller_nodes[0],
                                          controller_bootstrap([n.address for n in kafka.controller_nodes]),
                                          "replication").text)
        assert {r["NodeId"] for r in rows if r.get("Status") in ("Leader", "Follower")} == {"2", "3", "4"}, rows
    finally:
        cluster_down("kchaos-dynq")
