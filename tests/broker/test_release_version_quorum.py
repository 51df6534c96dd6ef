"""KAFKA-21426 on a real cluster: ``kafka-features upgrade --release-version``
moves kraft.version too, so a static quorum (controller.quorum.voters, kraft.version
0) becomes dynamic without anyone asking (docs/design.md, "Quorum membership").

Kafka 4.3.1, three controllers beside one broker, a static quorum formatted at
metadata.version 3.9-IV0 (the levels a cluster upgraded from 3.9 keeps): the
features and ``describe --status`` before, ``upgrade --release-version 4.3``, the
same after, then a controller restarted on its unchanged static config and a
follower controller asked to leave with ``remove-controller``. What Kafka answered
is printed (``-s``) as one JSON line. About half a minute (28 s once), but a
cluster of its own: behind ``long``."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.long]

MV_3_9_IV0 = 21   # MetadataVersion.IBP_3_9_IV0's feature level


def _features(node, bootstrap: str, *args: str):
    from broker.config import BROKER_PORT
    from infra.distribution import KAFKA_LIB
    from nemesis.upgrade import FEATURE_TOOL
    res = node.run(["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF",
                    "-cp", f"{KAFKA_LIB}/*", FEATURE_TOOL, "--bootstrap-server", f"{bootstrap}:{BROKER_PORT}",
                    *args], check=False, timeout=120)
    return res.exit, (res.out + "\n" + res.err).strip()


def test_release_version_upgrade_turns_a_static_quorum_dynamic():
    from broker.lifecycle import BrokerSettings
    from broker.quorum_tool import controller_bootstrap, describe, directory_id, parse_status, remove_controller
    from harness.run_cluster import cluster_down, cluster_up
    from nemesis.operations import controlled_shutdown
    from nemesis.upgrade import parse_features
    handle = cluster_up("kchaos-krv", nodes=1, controllers=3, kafka_version="4.3.1",
                        settings=BrokerSettings(features={"metadata.version": MV_3_9_IV0}))
    seen: dict = {}
    try:
        kafka = handle.kafka
        broker, controllers = kafka.broker_nodes[0], kafka.controller_nodes
        bootstrap = controller_bootstrap([n.address for n in controllers])
        config = controllers[0].run(["cat", "/etc/kafka/server.properties"]).out
        assert "controller.quorum.voters" in config and "controller.quorum.bootstrap.servers" not in config

        seen["features_before"] = parse_features(_features(broker, broker.address, "describe")[1])
        seen["status_before"] = parse_status(describe(controllers[0], bootstrap).text)
        seen["upgrade"] = _features(broker, broker.address, "upgrade", "--release-version", "4.3")
        seen["features_after"] = parse_features(_features(broker, broker.address, "describe")[1])
        seen["status_after"] = parse_status(describe(controllers[0], bootstrap).text)

        follower = next(n for n in controllers if int(n.name[1:]) != seen["status_after"].get("leader_id"))
        seen["shutdown"] = controlled_shutdown(kafka.brokers[follower.name], 60.0)
        kafka.restart(follower.name, 120.0)
        seen["restarted"] = follower.name
        seen["status_after_restart"] = parse_status(describe(controllers[0], bootstrap).text)
        removed = remove_controller(controllers[0], bootstrap, int(follower.name[1:]), directory_id(follower))
        seen["remove_follower"] = removed.summary()
        seen["status_after_remove"] = parse_status(describe(controllers[0], bootstrap).text)
        print("KAFKA-21426:", json.dumps(seen, default=str))

        assert seen["features_before"]["kraft.version"]["finalized"] == 0, seen["features_before"]
        assert seen["features_before"]["metadata.version"]["finalized"] == "3.9-IV0", seen["features_before"]
        assert seen["upgrade"][0] == 0, seen["upgrade"]
        assert seen["features_after"]["metadata.version"]["finalized"] == "4.3-IV0", seen["features_after"]
        assert seen["features_after"]["kraft.version"]["finalized"] == 1, \
            f"KAFKA-21426 did not reproduce: kraft.version after --release-version {seen['features_after']}"
    finally:
        cluster_down("kchaos-krv")
