"""The fault budget: how many nodes the random fault mix may impair at once.

A run that spends most of its time unable to write tests little. By default
the plan (``nemesis.packages.plan``) never has more faults on at once than
leave a quorum of KRaft controllers (every kchaos node is one) and
``min.insync.replicas`` replicas of every partition usable, and it leaves a
recovery window after each stop before the next fault that costs anything
(after Jepsen's combined nemesis, whose faults come and go with quiet time
between them).

Plans name targets abstractly, so a fault's **cost** is an upper bound: the
number of nodes it may leave unusable (down, paused, cut off from the
majority or from the clients, or slowed), counted as if every fault hit
different nodes. Clock faults cost nothing: a skewed node stays reachable.

With controllers on nodes of their own (isolated KRaft), the brokers and the
controllers are separate quorums: a cost is a pair (broker nodes, controller
nodes), ``op_costs``, and each side has its own room. Brokers need only
min.insync.replicas replicas of every partition; controllers a majority of
themselves. Combined clusters keep one count (the pair's second part is 0).
Pure functions, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable


@dataclass(frozen=True)
class Budget:
    """``nodes``: the cost the active faults may add up to (on the brokers when
    isolated); ``recovery_s``: the quiet time after a stop before a fault that
    costs anything starts; ``n``: the cluster's (broker) node count (costs depend
    on it); ``controllers``: controller-only nodes (0: combined) and
    ``controller_nodes`` the cost the active faults may add up to on them;
    ``standing``: the cost held all workload long by packages armed once
    (``with_standing``), counted in every ``fits``."""

    nodes: int
    recovery_s: float
    n: int
    controllers: int = 0
    controller_nodes: int = 0
    standing: tuple[int, int] = (0, 0)


Cost = tuple[int, int]  # (broker nodes, controller-only nodes) a fault may leave unusable


@runtime_checkable
class Standing(Protocol):
    """A package whose fault is on from its first step to the final phase
    (nemesis.proxy_nemesis.ProxyPackage): its cost, reckoned from the run's
    ``[nemesis]`` settings, is held for the whole plan."""

    def standing_cost(self, settings: Any, budget: Budget) -> Cost: ...


def with_standing(budget: Budget, packages: Iterable[Any], settings: Any) -> Budget:
    """``budget`` holding the summed standing costs of ``packages`` (those that are ``Standing``)."""
    costs = [p.standing_cost(settings, budget) for p in packages if isinstance(p, Standing)]
    return replace(budget, standing=(sum(c[0] for c in costs), sum(c[1] for c in costs)))


def default_nodes(n: int, replication_factor: int, min_insync: int) -> int:
    """Nodes that may be impaired while a controller quorum and min.insync.replicas
    replicas of every partition stay usable (worst case: all impaired nodes hold
    replicas of one partition). At least 1: a cluster with no such room (one
    node, or min.insync.replicas equal to the replication factor) still gets
    one fault at a time rather than a run whose faults never happen."""
    return max(1, min((n - 1) // 2, replication_factor - min_insync))


def default_broker_nodes(replication_factor: int, min_insync: int) -> int:
    """With separate controllers: brokers that may be impaired while every
    partition keeps min.insync.replicas usable replicas (at least 1, as
    ``default_nodes``)."""
    return max(1, replication_factor - min_insync)


def default_controller_nodes(controllers: int) -> int:
    """Controller-only nodes that may be impaired while a majority of them stays (at least 1)."""
    return max(1, (controllers - 1) // 2)


def target_cost(value: Mapping[str, Any], n: int) -> int:
    """Nodes a process-like target may hit: all, a minority, or one."""
    target = value.get("target")
    if target == "all":
        return n
    if target == "minority":
        return (n - 1) // 2
    return 1


def _partition_cost(value: Mapping[str, Any], n: int) -> int:
    majority = n // 2 + 1
    topology = value.get("topology", "isolate-node")
    if topology in ("bridge", "majorities-ring") and n < 3:
        topology = "halves"  # what nemesis.partition does with fewer than 3 nodes
    if topology == "client-only-leader":
        return n - 1
    if topology == "halves":
        big = n - n // 2
        return n - big if big >= majority else n
    if topology == "bridge":
        big = max(n // 2 + 1, n - n // 2)  # the larger half plus the middle node
        return n - big if big >= majority else n
    if topology == "majorities-ring":
        return 1 if n == 3 else n  # a 3-node line keeps a 2-node clique; larger rings keep none of majority size
    return 1  # isolate-*, one-way, client-cut-*: one node


def op_cost(op: Mapping[str, Any], n: int) -> int:
    """An upper bound on the nodes a start op leaves unusable."""
    value = op.get("value") or {}
    fault = value.get("fault")
    if fault == "clock":
        return 0
    if fault == "partition":
        return _partition_cost(value, n)
    return min(n, target_cost(value, n))


# Targets that hit one node of a known role: the quorum leader, a partition leader, a role (nemesis.roles).
_CONTROLLER_TARGETS = ("controller", "active-controller", "controllers")
_BROKER_TARGETS = ("leader", "brokers", "group-coordinator", "txn-coordinator")


def _role_cost(target: Any, brokers: int, controllers: int) -> Cost:
    if target == "all":
        return brokers, controllers
    if target == "minority":
        k = (brokers + controllers - 1) // 2
        return min(brokers, k), min(controllers, k)
    if target in _CONTROLLER_TARGETS:
        return 0, 1
    if target in _BROKER_TARGETS:
        return 1, 0
    return 1, 1  # a node drawn from all of them: either role


def op_costs(op: Mapping[str, Any], budget: Budget) -> Cost:
    """An upper bound on the (broker, controller-only) nodes a start op leaves
    unusable; (``op_cost``, 0) on combined nodes."""
    if not budget.controllers:
        return op_cost(op, budget.n), 0
    b, c = budget.n, budget.controllers
    value = op.get("value") or {}
    fault = value.get("fault")
    if fault == "clock":
        return 0, 0
    if fault != "partition":
        return _role_cost(value.get("target"), b, c)
    topology = value.get("topology", "isolate-node")
    if topology in ("isolate-leader", "client-cut-leader", "client-cut-node"):
        return 1, 0  # clients reach brokers only: a client cut costs a broker at most
    if topology == "client-only-leader":
        return b - 1, 0
    if topology == "isolate-controller":
        return 0, 1
    if topology in ("isolate-node", "one-way"):
        return _role_cost(value.get("target"), b, c)
    x = _partition_cost(value, b + c)
    return min(b, x), min(c, x)


def fits(budget: Budget, held: list[Cost], cost: Cost) -> bool:
    """Whether ``cost`` fits beside the costs of the faults already on and the
    standing cost. A side the start costs nothing on always has room for it
    (a standing cost may fill a side alone)."""
    on = [budget.standing, *held]
    return all(cost[side] == 0 or sum(h[side] for h in on) + cost[side] <= room
               for side, room in ((0, budget.nodes), (1, budget.controller_nodes)))
