"""What each fault package's start op aims at, drawn from the plan's seeded RNG
(nemesis.packages registers the packages and plans their timeline).

Plans name targets abstractly, because the cluster's state at fault time is
unknown when the plan is drawn: ``node_index`` (an index into the sorted node
names, taken modulo the node count; drawn below 840, which every count up to 8
divides, so the choice is uniform), ``partition_index`` (likewise, for the
leader of a partition of the run's topic) and ``seed`` (for random halves,
rings, bridges and minorities). The nemesis resolves them when it acts and
records the resolved nodes in the completed op. Every draw takes
``(rng, t, time_limit_s)``: the step's time and the workload's length.
"""
from __future__ import annotations

import random
from typing import Any, Sequence

from nemesis import clock, netem, operations, partition, power, process, quorum
from nemesis.protocol import Op

INDEX_RANGE = 840  # lcm(1..8): index % n is uniform for every node count up to 8
SEED_RANGE = 1 << 31


def weighted(rng: random.Random, choices: Sequence[tuple[Any, int]]) -> Any:
    total = sum(w for _, w in choices)
    x = rng.randrange(total)
    for item, w in choices:
        if x < w:
            return item
        x -= w
    raise AssertionError("unreachable")


def process_target(rng: random.Random) -> dict[str, Any]:
    """An abstract process/clock target."""
    kind = weighted(rng, [("node", 3), ("leader", 3), ("controller", 2), ("minority", 1), ("all", 1)])
    if kind == "node":
        return {"target": "node", "node_index": rng.randrange(INDEX_RANGE)}
    if kind == "leader":
        return {"target": "leader", "partition_index": rng.randrange(INDEX_RANGE)}
    if kind == "minority":
        return {"target": "minority", "seed": rng.randrange(SEED_RANGE)}
    return {"target": kind}


def draw_partition(rng: random.Random, t: float, time_limit_s: float) -> Op:
    topology = weighted(rng, [("isolate-node", 2), ("isolate-leader", 3), ("isolate-controller", 1),
                              ("halves", 2), ("majorities-ring", 1), ("bridge", 1), ("one-way", 1),
                              ("client-cut-node", 1), ("client-cut-leader", 2), ("client-only-leader", 1)])
    value: dict[str, Any] = {"fault": "partition", "topology": topology}
    if topology in ("isolate-node", "one-way", "client-cut-node"):
        value["node_index"] = rng.randrange(INDEX_RANGE)
    elif topology in ("isolate-leader", "client-cut-leader", "client-only-leader"):
        value["partition_index"] = rng.randrange(INDEX_RANGE)
    elif topology in ("halves", "majorities-ring", "bridge"):
        value["seed"] = rng.randrange(SEED_RANGE)
    return {"f": partition.START_PARTITION, "value": value}


def draw_kill(rng: random.Random, t: float, time_limit_s: float) -> Op:
    return {"f": process.KILL, "value": {"fault": "kill", **process_target(rng)}}


def draw_pause(rng: random.Random, t: float, time_limit_s: float) -> Op:
    return {"f": process.PAUSE, "value": {"fault": "pause", **process_target(rng)}}


def draw_client_cut_leader(rng: random.Random, t: float, time_limit_s: float) -> Op:
    return {"f": partition.START_PARTITION, "value": {"fault": "partition", "topology": "client-cut-leader",
                                                      "partition_index": rng.randrange(INDEX_RANGE)}}


def draw_quorum_change(rng: random.Random, t: float, time_limit_s: float) -> Op:
    """A controller removed from the quorum (nemesis.quorum): the active one or a
    voter by index, sometimes decommissioned (its disk formatted anew)."""
    return {"f": quorum.REMOVE_CONTROLLER,
            "value": {"fault": quorum.QUORUM_CHANGES, "target": weighted(
                rng, [(quorum.ACTIVE_CONTROLLER, 1), (quorum.CONTROLLERS, 1)]),
                "node_index": rng.randrange(INDEX_RANGE), "decommission": rng.random() < 0.3}}


PLANNED_MOVE_WEIGHTS = ((operations.ELECT_PREFERRED, 1), (operations.REASSIGN, 1), (operations.CONTROLLED_SHUTDOWN, 1))


def draw_planned_move(rng: random.Random, t: float, time_limit_s: float) -> Op:
    """One planned leader move (nemesis.operations) of a partition's leader."""
    return {"f": weighted(rng, PLANNED_MOVE_WEIGHTS),
            "value": {"fault": operations.PLANNED_MOVES, "target": "leader",
                      "partition_index": rng.randrange(INDEX_RANGE)}}


def draw_power(rng: random.Random, t: float, time_limit_s: float) -> Op:
    return {"f": power.POWER_LOSS, "value": {"fault": power.FAULT, **process_target(rng)}}


NETEM_DELAYS_MS = (20, 50, 100, 250, 500, 1000)


def draw_netem(rng: random.Random, t: float, time_limit_s: float) -> Op:
    value: dict[str, Any] = {"fault": "netem", **process_target(rng),
                             "links": weighted(rng, [("all", 2), ("peers", 2), ("client", 1)])}
    delay = rng.choice(NETEM_DELAYS_MS) if rng.random() < 0.8 else 0
    loss = rng.choice((1, 5, 20)) if not delay or rng.random() < 0.3 else 0
    value.update(delay_ms=delay, jitter_ms=round(delay * rng.choice((0, 0.1, 0.5)), 3), loss_pct=loss,
                 reorder_pct=rng.choice((0, 0, 10, 25)) if delay else 0)
    return {"f": netem.START_NETEM, "value": value}


CLOCK_MAGNITUDES_S = (2, 30, 120, 600, 3600)


def draw_clock(rng: random.Random, t: float, time_limit_s: float) -> Op:
    target = process_target(rng)
    offset = rng.choice((-1, 1)) * rng.choice(CLOCK_MAGNITUDES_S)
    if rng.random() < 0.7:
        return {"f": clock.BUMP, "value": {"fault": "clock", **target, "offset_s": offset}}
    # The loop runs at most until the end of the run; the package's stop kills it sooner.
    return {"f": clock.STROBE, "value": {"fault": "clock", **target, "offsets_s": [0, offset],
                                         "period_s": rng.choice((2.5, 4.0, 7.0)),
                                         "duration_s": max(1.0, round(time_limit_s - t + 1.0, 3))}}
