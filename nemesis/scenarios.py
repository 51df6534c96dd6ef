"""Targeted fault sequences for known ways to lose acknowledged writes.

Random faults find such losses by luck; these packages walk a cluster into
them on purpose, one step after another, each step recorded as its own op:

``unclean-election`` (one cycle):
  1. ``start-partition`` one-way on the leader of a partition, port 9092 only:
     the followers' fetches stop, the controller link (9093) and clients don't;
  2. ``await-isr-shrink``: wait until the controller shows the ISR shrunk to
     the leader alone, then hold a few seconds while it acknowledges writes alone;
  3. ``kill`` that leader; 4. ``await-new-leader``: wait until another broker
     leads (with unclean election on, an out-of-sync follower);
  5. ``stop-partition``, 6. ``start``: the old leader returns and truncates.

``isolated-leader``: isolate a partition's leader from every other broker
(the harness host still reaches it) long enough for the controller to fence
it and elect another, then heal.

Scenario packages are chosen by name (``--nemesis unclean-election``) and are
not part of ``all``; they reuse the partition and kill nemeses, so they do not
combine with the ``partition`` or ``kill`` packages.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from nemesis import partition, process
from nemesis.core import NemesisContext, Op, compose, completed, current_states, partition_leader
from nemesis.packages import INDEX_RANGE, PACKAGES, copy_op

AWAIT_ISR_SHRINK = "await-isr-shrink"
AWAIT_NEW_LEADER = "await-new-leader"


class AwaitNemesis:
    """Ops that only wait for the cluster to reach a state, and record it."""

    fs = frozenset({AWAIT_ISR_SHRINK, AWAIT_NEW_LEADER})

    def __init__(self) -> None:
        self.ctx: NemesisContext | None = None
        self.last_leader: dict[int, str | None] = {}

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def _state(self, p: int):
        states = current_states(self.ctx.cluster, self.ctx.topic)
        return next((s for s in states if s.partition == p), None)

    def _await(self, p: int, reached: Callable[[Any], bool], deadline: float) -> tuple[Any, bool]:
        """Poll the partition's state until ``reached(state)`` or the deadline."""
        state = None
        while time.monotonic() < deadline:
            state = self._state(p)
            if state and state.leader is not None and reached(state):
                return state, True
            time.sleep(0.5)
        return state, False

    def invoke(self, op: Op) -> Op:
        value = dict(op.get("value") or {})
        timeout_s = float(value.get("timeout_s", 60))
        p, leader = partition_leader(self.ctx, value)
        started = time.monotonic()
        deadline = started + timeout_s
        if op["f"] == AWAIT_ISR_SHRINK:
            self.last_leader[p] = leader
            state, reached = self._await(p, lambda s: list(s.isr) == [s.leader], deadline)
            if reached:
                time.sleep(float(value.get("hold_s", 0)))
            out = {"leader": leader, "reached": reached}
        else:
            previous = value.get("leader") or self.last_leader.get(p) or leader
            state, _ = self._await(p, lambda s: f"n{s.leader}" != previous, deadline)
            new = f"n{state.leader}" if state and state.leader is not None else None
            out = {"previous_leader": previous, "leader": new, "reached": new not in (None, previous)}
        return completed(op, {**value, "partition": p, **out, "isr": list(state.isr) if state else None,
                              "waited_s": round(time.monotonic() - started, 2)}, action=None)

    def teardown(self) -> None:
        pass


def unclean_election_cycle(rng: random.Random, hold_s: float = 5.0) -> list[tuple[float, Op]]:
    """One cycle, as (offset in seconds, op); offsets are lower bounds, the
    await steps take as long as the cluster does."""
    k = rng.randrange(INDEX_RANGE)
    target = {"target": "leader", "partition_index": k}
    return [
        (0.0, {"f": partition.START, "value": {"fault": "partition", "topology": "one-way", **target,
                                               "ports": [9092]}}),
        (0.1, {"f": AWAIT_ISR_SHRINK, "value": {"scenario": "unclean-election", "partition_index": k,
                                                "hold_s": hold_s, "timeout_s": 90}}),
        (0.2, {"f": process.KILL, "value": {"fault": "kill", **target}}),
        (0.3, {"f": AWAIT_NEW_LEADER, "value": {"scenario": "unclean-election", "partition_index": k,
                                                "timeout_s": 60}}),
        (5.0, {"f": partition.STOP, "value": {"fault": "partition"}}),
        (5.1, {"f": process.START, "value": {"fault": "kill", "target": "all"}}),
    ]


def isolated_leader_cycle(rng: random.Random, hold_s: float = 20.0) -> list[tuple[float, Op]]:
    k = rng.randrange(INDEX_RANGE)
    return [
        (0.0, {"f": partition.START, "value": {"fault": "partition", "topology": "isolate-leader",
                                               "partition_index": k}}),
        (hold_s, {"f": partition.STOP, "value": {"fault": "partition"}}),
    ]


@dataclass(frozen=True)
class ScenarioPackage:
    """A fixed sequence of steps repeated through the run, ``interval_s`` apart."""

    name: str
    color: str
    cycle: Callable[[random.Random], list[tuple[float, Op]]]
    make_nemesis: Callable[[], Any]
    final: tuple[Op, ...]
    expected_cycle_s: float  # how long a cycle takes on a healthy cluster, for planning

    def plan(self, time_limit_s: float, interval_s: float, rng: random.Random) -> list[tuple[float, Op]]:
        out: list[tuple[float, Op]] = []
        t = rng.uniform(0.5, 1.0) * interval_s
        while t + self.expected_cycle_s <= time_limit_s or not out:
            out += [(round(t + dt, 3), op) for dt, op in self.cycle(rng)]
            t += self.expected_cycle_s + rng.uniform(0.5, 1.5) * interval_s
        return out

    def final_ops(self) -> list[Op]:
        return [copy_op(op) for op in self.final]


SCENARIOS: dict[str, ScenarioPackage] = {
    "unclean-election": ScenarioPackage(
        "unclean-election", "#862e9c", unclean_election_cycle,
        lambda: compose([partition.PartitionNemesis(), process.KillNemesis(), AwaitNemesis()]),
        PACKAGES["partition"].final + PACKAGES["kill"].final,
        expected_cycle_s=45.0),
    "isolated-leader": ScenarioPackage(
        "isolated-leader", "#e8590c", isolated_leader_cycle, partition.PartitionNemesis,
        PACKAGES["partition"].final,
        expected_cycle_s=25.0),
}
