"""Fault targets by KRaft role (docs/design.md, "Isolated KRaft").

On a cluster whose controllers run on nodes of their own, a fault may aim at
one role: ``controllers`` (one controller-only node), ``active-controller``
(the quorum leader) or ``brokers`` (one broker-only node). Like the leader
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
import random
from typing import Any, Iterable, Sequence

from broker.cluster import KafkaCluster
from infra.errors import UsageError
from nemesis.topology import sort_nodes

CONTROLLERS = "controllers"
ACTIVE_CONTROLLER = "active-controller"
BROKERS = "brokers"
ROLE_TARGETS = (CONTROLLERS, ACTIVE_CONTROLLER, BROKERS)
# Role targets that need controller-only nodes: on combined nodes there is no
# node that is only a controller or only a broker.
ISOLATED_ONLY = (CONTROLLERS, BROKERS)
# The faults whose starts aim at one node and so can aim at a role.
TARGETABLE_FAULTS = ("kill", "pause", "power-loss", "netem", "clock", "partition")
INDEX_RANGE = 840  # as nemesis.packages: index % n is uniform for every count up to 8


def resolve_role(cluster: KafkaCluster, target: str, value: dict[str, Any],
                 rng: random.Random) -> tuple[list[str], dict[str, Any]]:
    """(node names, details) of a role target, as the cluster is now."""
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


def check_targets(targets: Sequence[str], controllers: int, steps: Iterable[dict[str, Any]] = ()) -> None:
    """UsageError for an unknown role target, or one (in ``targets`` or in an
    explicit plan's steps) that a cluster with ``controllers`` controller-only
    nodes lacks."""
    for target in targets:
        if target not in ROLE_TARGETS:
            raise UsageError(f"unknown nemesis target {target!r}; valid targets: {', '.join(ROLE_TARGETS)}")
    used = list(targets) + [str((s.get("value") or {}).get("target")) for s in steps]
    lacking = next((t for t in used if t in ISOLATED_ONLY), None) if controllers == 0 else None
    if lacking is not None:
        raise UsageError(f"nemesis target {lacking!r} needs separate controllers, but this cluster's nodes are "
                         "combined (set controllers = 3)")


def aim(op: dict[str, Any], targets: Sequence[str], rng: random.Random) -> dict[str, Any]:
    """``op`` aimed at one of ``targets`` when it is a start of a targetable fault
    (process-like: its target; a partition: isolate that node); else ``op``."""
    value = dict(op.get("value") or {})
    if value.get("fault") not in TARGETABLE_FAULTS:
        return op
    for key in ("target", "node", "node_index", "partition", "partition_index", "seed"):
        value.pop(key, None)
    if value["fault"] == "partition":
        value["topology"] = "isolate-node"
    value["target"] = targets[rng.randrange(len(targets))]
    value["node_index"] = rng.randrange(INDEX_RANGE)
    return {**op, "value": value}


def with_targets(package: Any, targets: Sequence[str]) -> Any:
    """A fault package (nemesis.packages.FaultPackage) whose drawn starts aim at
    ``targets`` (unchanged when there are none)."""
    if not targets or getattr(package, "name", None) not in TARGETABLE_FAULTS:
        return package
    draw = package.draw_start

    def draw_start(rng: random.Random, t: float, time_limit_s: float) -> dict[str, Any]:
        return aim(draw(rng, t, time_limit_s), targets, rng)
    return dataclasses.replace(package, draw_start=draw_start)
