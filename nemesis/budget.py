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
Pure functions, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Budget:
    """``nodes``: the cost the active faults may add up to; ``recovery_s``: the
    quiet time after a stop before a fault that costs anything starts; ``n``:
    the cluster's node count (costs depend on it)."""

    nodes: int
    recovery_s: float
    n: int


def default_nodes(n: int, replication_factor: int, min_insync: int) -> int:
    """Nodes that may be impaired while a controller quorum and min.insync.replicas
    replicas of every partition stay usable (worst case: all impaired nodes hold
    replicas of one partition). At least 1: a cluster with no such room (one
    node, or min.insync.replicas equal to the replication factor) still gets
    one fault at a time rather than a run whose faults never happen."""
    return max(1, min((n - 1) // 2, replication_factor - min_insync))


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
