"""Fault targets by KRaft role (docs/design.md, "Isolated KRaft").

On a cluster whose controllers run on nodes of their own, a fault may aim at
one role: ``controllers`` (one controller-only node), ``active-controller``
(the quorum leader) or ``brokers`` (one broker-only node); on any layout also
``group-coordinator`` (the leader of the ``__consumer_offsets`` partition that
holds the op's ``group``), ``txn-coordinator`` (of the ``__transaction_state``
partition of its ``transactional_id``) and ``share-coordinator`` (of the
``__share_group_state`` partition that holds the state of one share-partition
of the op's ``share_group``: partition ``partition_index`` modulo the count of
its ``topic``), found as Kafka finds them: the id's Java ``String.hashCode``,
made non-negative, modulo the internal topic's partition count. A
share-partition's id is ``"<group>:<topic id>:<partition>"``, the topic id in
Kafka's base64 form (Kafka 4.3.1's ``ShareCoordinatorService.partitionFor`` and
``SharePartitionKey.asCoordinatorKey``). Like the leader
target, a role target is resolved when the op runs, against the cluster as
it is then; ``node_index`` (modulo the role's node count) or ``seed`` picks
the node within the role.

``[nemesis] targets`` names the role targets a run's fault packages draw
from: ``with_targets`` wraps a package so that every start it draws aims at
one of them (a partition start isolates that node), before the fault budget
weighs it (nemesis.budget). ``check_targets`` refuses, before any cluster
starts, a role target the cluster's layout lacks.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from typing import Any, Iterable, Sequence

from broker.cluster import KafkaCluster
from infra.errors import UsageError
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

CONTROLLERS = "controllers"
ACTIVE_CONTROLLER = "active-controller"
BROKERS = "brokers"
GROUP_COORDINATOR = "group-coordinator"
TXN_COORDINATOR = "txn-coordinator"
SHARE_COORDINATOR = "share-coordinator"
ROLE_TARGETS = (CONTROLLERS, ACTIVE_CONTROLLER, BROKERS, GROUP_COORDINATOR, TXN_COORDINATOR, SHARE_COORDINATOR)
# Coordinator target -> (the internal topic holding its state, the op value key naming the id).
COORDINATORS = {GROUP_COORDINATOR: ("__consumer_offsets", "group"),
                TXN_COORDINATOR: ("__transaction_state", "transactional_id"),
                SHARE_COORDINATOR: ("__share_group_state", "share_group")}
# What a workload must run for each coordinator target to have an id to aim at.
COORDINATOR_NEEDS = {GROUP_COORDINATOR: 'a consumer group (mode = "subscribe")',
                     TXN_COORDINATOR: "transactions (transactions = true)",
                     SHARE_COORDINATOR: 'a share group (mode = "share")'}
# The op value keys a role target is resolved from: a fault that resolves its
# node later (a partition's isolated node) passes these on.
ROLE_KEYS = ("target", "node_index", "seed", "group", "transactional_id", "share_group", "topic",
             "partition_index")
# Role targets that need controller-only nodes: on combined nodes there is no
# node that is only a controller or only a broker.
ISOLATED_ONLY = (CONTROLLERS, BROKERS)
# The faults whose starts aim at one node and so can aim at a role.
TARGETABLE_FAULTS = ("kill", "pause", "power-loss", "netem", "clock", "partition")
INDEX_RANGE = 840  # as nemesis.draws (not imported: draws -> partition -> roles): index % n is uniform for every count up to 8


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The internal-topic partition of a group or transactional id (Kafka's
    ``Utils.abs(key.hashCode) % partitions``; Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def share_partition_key(group: str, topic_id: str, partition: int) -> str:
    """Kafka's coordinator key of one share-partition's state (SharePartitionKey.asCoordinatorKey)."""
    return f"{group}:{topic_id}:{partition}"


def kafka_uuid_text(standard_base64: str) -> str:
    """A topic id as Kafka's ``Uuid.toString`` writes it: URL-safe base64 without
    padding. confluent-kafka's ``Uuid`` prints the standard alphabet ("+" and "/"
    where Kafka has "-" and "_"), so the two differ for about half of all ids."""
    return standard_base64.rstrip("=").replace("+", "-").replace("/", "_")


def topic_id(cluster: KafkaCluster, topic: str) -> str | None:
    """``topic``'s id in Kafka's base64 form (``kafka_uuid_text``), or None when
    no broker answers."""
    # imported here so `kchaos --help` answers before confluent_kafka loads
    from confluent_kafka import TopicCollection
    try:
        admin = cluster.admin()  # held until Kafka answers: a collected client fails its futures (_DESTROY)
        futures = admin.describe_topics(TopicCollection([topic]), request_timeout=5)
        return kafka_uuid_text(str(futures[topic].result(timeout=10).topic_id))
    except Exception as exc:  # noqa: BLE001 - the broker asked is down: no coordinator to name now
        log.info("topic id of %s unavailable: %r", topic, exc)
        return None


def _states(cluster: KafkaCluster, topic: str) -> list[Any]:
    cid = cluster.active_controller()
    return (cluster.authoritative_partition_states(topic, cid) if cid is not None else None) \
        or cluster.partition_states(topic)


def _coordinator_key(cluster: KafkaCluster, target: str, value: dict[str, Any],
                     details: dict[str, Any]) -> str | None:
    """The id Kafka hashes for ``target``: the op's group or transactional id,
    or for a share coordinator its share-partition's key (None when the topic
    or its id cannot be read now)."""
    key = str(value[COORDINATORS[target][1]])
    if target != SHARE_COORDINATOR:
        return key
    topic = value.get("topic")
    if not topic:
        raise UsageError(f"target {target!r} needs the op's 'topic'")
    count = len(cluster.partition_states(str(topic)))
    tid = topic_id(cluster, str(topic)) if count else None
    if tid is None:
        return None
    partition = int(value.get("partition_index") or 0) % count
    details.update(topic=topic, share_partition=partition)
    return share_partition_key(key, tid, partition)


def _coordinator(cluster: KafkaCluster, target: str, value: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    topic, key = COORDINATORS[target]
    if not value.get(key):
        raise UsageError(f"target {target!r} needs the op's {key!r}")
    details: dict[str, Any] = {"target": target, key: value[key]}
    states = _states(cluster, topic)
    if not states:  # no group or transaction has used the topic yet: no coordinator to hit
        return [], details
    coordinator_key = _coordinator_key(cluster, target, value, details)
    if coordinator_key is None:
        return [], details
    p = coordinator_partition(coordinator_key, len(states))
    leader = next((s.leader for s in states if s.partition == p), None)
    details.update(partition=p, coordinator=f"n{leader}" if leader is not None else None)
    return ([f"n{leader}"] if leader is not None else []), details


def resolve_role(cluster: KafkaCluster, target: str, value: dict[str, Any],
                 rng: random.Random) -> tuple[list[str], dict[str, Any]]:
    """(node names, details) of a role target, as the cluster is now."""
    if target in COORDINATORS:
        return _coordinator(cluster, target, value)
    details: dict[str, Any] = {"target": target}
    if target == ACTIVE_CONTROLLER:
        cid = cluster.active_controller()
        controller = f"n{cid}" if cid is not None else None
        details["controller"] = controller
        return ([controller] if controller else []), details
    if target not in ISOLATED_ONLY:
        raise UsageError(f"unknown role target {target!r}; choose one of {', '.join(ROLE_TARGETS)}")
    if not cluster.isolated:
        raise UsageError(f"target {target!r} needs controllers on nodes of their own (controllers = 3)")
    nodes = cluster.controller_nodes if target == CONTROLLERS else cluster.broker_nodes
    names = sort_nodes(n.name for n in nodes)
    if value.get("node_index") is not None:
        picked = names[int(value["node_index"]) % len(names)]
    else:
        picked = rng.choice(names)
    details["role"] = cluster.role_of(picked)
    return [picked], details


def check_targets(targets: Sequence[str], controllers: int, steps: Iterable[dict[str, Any]] = (),
                  ids: dict[str, list[str]] | None = None) -> None:
    """UsageError for an unknown role target, or one (in ``targets`` or in an
    explicit plan's steps) that a cluster with ``controllers`` controller-only
    nodes lacks, or a coordinator target whose workload has no such id
    (``ids``: op value key -> the run's ids, as ``with_targets`` takes)."""
    for target in targets:
        if target not in ROLE_TARGETS:
            raise UsageError(f"unknown nemesis target {target!r}; valid targets: {', '.join(ROLE_TARGETS)}")
        if target in COORDINATORS and not (ids or {}).get(COORDINATORS[target][1]):
            raise UsageError(f"nemesis target {target!r} needs a workload with {COORDINATOR_NEEDS[target]}")
    used = list(targets) + [str((s.get("value") or {}).get("target")) for s in steps]
    lacking = next((t for t in used if t in ISOLATED_ONLY), None) if controllers == 0 else None
    if lacking is not None:
        raise UsageError(f"nemesis target {lacking!r} needs separate controllers, but this cluster's nodes are "
                         "combined (set controllers = 3)")


def aim(op: dict[str, Any], targets: Sequence[str], rng: random.Random,
        ids: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """``op`` aimed at one of ``targets`` when it is a start of a targetable fault
    (process-like: its target; a partition: isolate that node); else ``op``.
    A coordinator target also names one of the run's ``ids`` (op value key ->
    the group ids, transactional ids or share groups, and for a share group
    ``topic`` -> the run's topic) to find the coordinator of; a share
    coordinator also draws the share-partition (``partition_index``)."""
    value = dict(op.get("value") or {})
    if value.get("fault") not in TARGETABLE_FAULTS:
        return op
    for key in ("target", "node", "node_index", "partition", "partition_index", "seed", "group", "transactional_id",
                "share_group", "topic"):
        value.pop(key, None)
    if value["fault"] == "partition":
        value["topology"] = "isolate-node"
    value["target"] = targets[rng.randrange(len(targets))]
    value["node_index"] = rng.randrange(INDEX_RANGE)
    if value["target"] in COORDINATORS:
        key = COORDINATORS[value["target"]][1]
        choices = (ids or {}).get(key) or []
        if choices:
            value[key] = choices[rng.randrange(len(choices))]
        if value["target"] == SHARE_COORDINATOR and (ids or {}).get("topic"):
            value["topic"] = (ids or {})["topic"][0]
            value["partition_index"] = rng.randrange(INDEX_RANGE)
    return {**op, "value": value}


def with_targets(package: Any, targets: Sequence[str], ids: dict[str, list[str]] | None = None) -> Any:
    """A fault package (nemesis.packages.FaultPackage) whose drawn starts aim at
    ``targets`` (unchanged when there are none); ``ids`` as for ``aim``."""
    if not targets or getattr(package, "name", None) not in TARGETABLE_FAULTS:
        return package
    draw = package.draw_start

    def draw_start(rng: random.Random, t: float, time_limit_s: float) -> dict[str, Any]:
        return aim(draw(rng, t, time_limit_s), targets, rng, ids)
    return dataclasses.replace(package, draw_start=draw_start)
