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

``elr-election`` (one cycle; default safe settings: unclean election off,
min.insync.replicas=2 of 3, Eligible Leader Replicas on as Kafka 4.1+ formats
new clusters): the same cut, then
  2. ``await-isr-shrink`` with ``elr``: wait until the ISR is the leader alone,
     then until the controller lists an Eligible Leader Replica (KIP-966) for the
     partition; the ELR is read with Kafka's ``TopicCommand --describe`` run on a
     node (about 2 s a call; confluent-kafka does not expose it) and recorded as
     ``elr`` in the op value (``elr_reached`` false if it never showed);
  3. ``kill`` that leader; 4. ``await-new-leader``: the controller elects an
     ELR member ("Setting new leader ... using ELR" in its log), a clean
     election by design: acks=all writes are refused while ISR < min ISR;
  5. ``stop-partition``, 6. ``start``. Expected verdict: valid.
Killing followers instead does not get there: with combined nodes two kills
lose the controller quorum, and a SIGKILLed broker leaves the ELR when it
registers again (an unclean shutdown). Writes must flow during the cut: a
follower with nothing to fetch stays caught up and in the ISR.

``isolated-leader``: isolate a partition's leader from every other broker
(the harness host still reaches it) long enough for the controller to fence
it and elect another, then heal.

``power-loss-all``: every broker loses power at once (nemesis.power), then all
come back. ``power-loss-elr``: a partition's leader loses power, then, once
another leads, that one too; then both come back. They reuse the power-loss
nemesis (shared with the ``power-loss`` package when both are chosen).

Scenario packages are chosen by name (``--nemesis unclean-election``) and are
not part of ``all``; they reuse the partition, kill and power-loss nemeses,
and share them with those packages when mixed (``unclean-election,partition,
kill,pause``: nemesis.packages.nemeses_of), so a package's fault can overlap a
cycle and end its cut or restart its killed broker early.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from broker.config import BROKER_PORT
from infra.distribution import KAFKA_LIB
from nemesis import partition, power, process
from nemesis.protocol import NemesisContext, Op, compose, completed, current_states, partition_leader
from nemesis.draws import INDEX_RANGE
from nemesis.packages import PACKAGES, copy_op

AWAIT_ISR_SHRINK = "await-isr-shrink"
AWAIT_NEW_LEADER = "await-new-leader"


def describe_elr(ctx: NemesisContext, p: int, timeout_s: float = 30.0) -> tuple[list[int], list[int]] | None:
    """(ELR, last known ELR) of partition ``p`` of ctx.topic, from Kafka's
    TopicCommand run on the active controller's node (any node if none is
    known); None when it could not be read."""
    cid = ctx.cluster.active_controller()
    nodes = [ctx.cluster.node(cid)] if cid is not None else []
    nodes += [n for n in ctx.cluster.nodes if n not in nodes]
    argv = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIB}/*",
            "org.apache.kafka.tools.TopicCommand", "--describe", "--topic", str(ctx.topic)]
    for node in nodes[:2]:
        try:
            res = node.run([*argv, "--bootstrap-server", f"{node.address}:{BROKER_PORT}"],
                           check=False, timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a down node: ask the next
            continue
        parsed = parse_elr(res.out, p)
        if res.exit == 0 and parsed is not None:
            return parsed
    return None


def parse_elr(text: str, p: int) -> tuple[list[int], list[int]] | None:
    """ELR and LastKnownElr of partition ``p`` in ``TopicCommand --describe`` output."""
    def ids(field: str) -> list[int]:
        return [int(x) for x in field.split(",") if x.strip().isdigit()]

    for line in text.splitlines():
        cols = dict(c.split(":", 1) for c in line.strip().split("\t") if ":" in c)
        cols = {k.strip(): v.strip() for k, v in cols.items()}
        if cols.get("Partition") == str(p) and "Elr" in cols:
            return ids(cols["Elr"]), ids(cols.get("LastKnownElr", ""))
    return None


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
            out = {"leader": leader, "reached": reached}
            if reached and value.get("elr"):
                out.update(self._await_elr(p, deadline))
            if reached:
                time.sleep(float(value.get("hold_s", 0)))
        else:
            previous = value.get("leader") or self.last_leader.get(p) or leader
            state, _ = self._await(p, lambda s: f"n{s.leader}" != previous, deadline)
            new = f"n{state.leader}" if state and state.leader is not None else None
            out = {"previous_leader": previous, "leader": new, "reached": new not in (None, previous)}
        return completed(op, {**value, "partition": p, **out, "isr": list(state.isr) if state else None,
                              "waited_s": round(time.monotonic() - started, 2)}, action=None)

    def _await_elr(self, p: int, deadline: float) -> dict[str, Any]:
        """Poll the partition's ELR until it is non-empty or the deadline."""
        elr = last_known = None
        while True:
            got = describe_elr(self.ctx, p, timeout_s=max(5.0, min(30.0, deadline - time.monotonic())))
            if got is not None:
                elr, last_known = got
                if elr:
                    break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        return {"elr": elr, "last_known_elr": last_known, "elr_reached": bool(elr)}

    def teardown(self) -> None:
        pass


def unclean_election_cycle(rng: random.Random, hold_s: float = 5.0) -> list[tuple[float, Op]]:
    """One cycle, as (offset in seconds, op); offsets are lower bounds, the
    await steps take as long as the cluster does."""
    return _isolate_and_kill_leader(rng, "unclean-election", hold_s, elr=False)


def elr_election_cycle(rng: random.Random, hold_s: float = 0.0) -> list[tuple[float, Op]]:
    """Like unclean_election_cycle, but the await also waits for an Eligible
    Leader Replica, so that killing the leader makes the controller elect it."""
    return _isolate_and_kill_leader(rng, "elr-election", hold_s, elr=True)


def _isolate_and_kill_leader(rng: random.Random, scenario: str, hold_s: float, elr: bool) -> list[tuple[float, Op]]:
    """Cut a partition's leader off from its followers (one way), wait for the
    ISR to shrink to it (and, with ``elr``, for an Eligible Leader Replica),
    kill it, wait for a new leader; then heal and restart everything."""
    k = rng.randrange(INDEX_RANGE)
    target = {"target": "leader", "partition_index": k}
    shrink = {"scenario": scenario, "partition_index": k, **({"elr": True} if elr else {}),
              "hold_s": hold_s, "timeout_s": 90}
    return [
        (0.0, {"f": partition.START_PARTITION,
               "value": {"fault": "partition", "topology": "one-way", **target, "ports": [9092]}}),
        (0.1, {"f": AWAIT_ISR_SHRINK, "value": shrink}),
        (0.2, {"f": process.KILL, "value": {"fault": "kill", **target}}),
        (0.3, {"f": AWAIT_NEW_LEADER, "value": {"scenario": scenario, "partition_index": k, "timeout_s": 60}}),
        (5.0, {"f": partition.STOP_PARTITION, "value": {"fault": "partition"}}),
        (5.1, {"f": process.RESTART, "value": {"fault": "kill", "target": "all"}}),
    ]


def isolated_leader_cycle(rng: random.Random, hold_s: float = 20.0) -> list[tuple[float, Op]]:
    k = rng.randrange(INDEX_RANGE)
    return [
        (0.0, {"f": partition.START_PARTITION,
               "value": {"fault": "partition", "topology": "isolate-leader", "partition_index": k}}),
        (hold_s, {"f": partition.STOP_PARTITION, "value": {"fault": "partition"}}),
    ]


def power_loss_all_cycle(rng: random.Random, hold_s: float = 5.0) -> list[tuple[float, Op]]:
    """Every broker loses power at once (docs/design.md, "Faults"), then all come back."""
    return [
        (0.0, {"f": power.POWER_LOSS, "value": {"fault": power.FAULT, "scenario": "power-loss-all", "target": "all"}}),
        (hold_s, {"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}}),
    ]


def power_loss_elr_cycle(rng: random.Random, hold_s: float = 5.0) -> list[tuple[float, Op]]:
    """Two brokers lose power in turn: a partition's leader, then (once the
    controller has moved leadership) its new leader; then both come back. Two
    unclean shutdowns, one more than KIP-966 claims to tolerate with
    min.insync.replicas=2."""
    k = rng.randrange(INDEX_RANGE)
    target = {"target": "leader", "partition_index": k}
    return [
        (0.0, {"f": power.POWER_LOSS, "value": {"fault": power.FAULT, "scenario": "power-loss-elr", **target}}),
        (0.1, {"f": AWAIT_NEW_LEADER, "value": {"scenario": "power-loss-elr", "partition_index": k,
                                                "timeout_s": 60}}),
        (0.2, {"f": power.POWER_LOSS, "value": {"fault": power.FAULT, "scenario": "power-loss-elr", **target}}),
        (0.2 + hold_s, {"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}}),
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
        return [step for cycle in self.plan_cycles(time_limit_s, interval_s, rng) for step in cycle]

    def plan_cycles(self, time_limit_s: float, interval_s: float,
                    rng: random.Random) -> list[list[tuple[float, Op]]]:
        """The plan cycle by cycle (kchaos shrink keeps or drops a cycle whole).

        As many cycles as fit in the time limit when each takes ``expected_cycle_s``
        (its waits included) and ``interval_s`` (0.5x to 1.5x) apart. Each cycle is
        planned its gap after the previous one's last step: the runner starts a step
        its planned gap after the previous step *completed* (harness/fault_pacing.py),
        so the waits' real length is added at run time and must not be planned too."""
        out: list[list[tuple[float, Op]]] = []
        t = reserved = rng.uniform(0.5, 1.0) * interval_s
        while reserved + self.expected_cycle_s <= time_limit_s or not out:
            out.append([(round(t + dt, 3), op) for dt, op in self.cycle(rng)])
            gap = rng.uniform(0.5, 1.5) * interval_s
            reserved += self.expected_cycle_s + gap
            t = out[-1][-1][0] + gap
        return out

    def final_ops(self) -> list[Op]:
        return [copy_op(op) for op in self.final]


SCENARIOS: dict[str, ScenarioPackage] = {
    "unclean-election": ScenarioPackage(
        "unclean-election", "#862e9c", unclean_election_cycle,
        lambda: compose([partition.PartitionNemesis(), process.KillNemesis(), AwaitNemesis()]),
        PACKAGES["partition"].final + PACKAGES["kill"].final,
        expected_cycle_s=45.0),
    "elr-election": ScenarioPackage(
        "elr-election", "#5f3dc4", elr_election_cycle,
        lambda: compose([partition.PartitionNemesis(), process.KillNemesis(), AwaitNemesis()]),
        PACKAGES["partition"].final + PACKAGES["kill"].final,
        expected_cycle_s=45.0),
    "isolated-leader": ScenarioPackage(
        "isolated-leader", "#e8590c", isolated_leader_cycle, partition.PartitionNemesis,
        PACKAGES["partition"].final,
        expected_cycle_s=25.0),
    "power-loss-all": ScenarioPackage(
        "power-loss-all", "#5c940d", power_loss_all_cycle, power.PowerLossNemesis,
        ({"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}},),
        expected_cycle_s=30.0),
    "power-loss-elr": ScenarioPackage(
        "power-loss-elr", "#5c940d", power_loss_elr_cycle,
        lambda: compose([power.PowerLossNemesis(), AwaitNemesis()]),
        ({"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}},),
        expected_cycle_s=45.0),
}
