"""Planned operations as faults: the leader moves an operator makes on purpose.

Losses do not only follow crashes. KAFKA-20554 (docs/design.md, "Planned
operations") reports acks=1 records lost when leadership moves by plan:
a preferred-leader election, a partition reassignment that removes the
leader, a controlled shutdown of the leader's broker. Each moves leadership
to a follower that may not hold the newest records the old leader already
acknowledged; the old leader then truncates to the new one's log.

Ops (package ``planned-moves``; each value names ``target`` "leader" with
``partition``/``partition_index``, as kill does; every completion records
what Kafka answered):

``elect-preferred``: make a follower in the ISR the preferred replica when the
  leader already is (a reassignment of the same replicas in a new order,
  which moves no data), then a preferred-leader election (Admin
  ``elect_leaders``). completed: ``partition``, ``replicas_before``,
  ``replicas`` (the order elected on), ``reorder`` (the tool's answer, when it
  reordered), ``election`` (None: elected; else Kafka's error), ``leader``
  before and ``new_leader`` after.
``reassign-partition``: reassign the partition away from its leader (its
  followers, plus a broker holding no replica when there is one, so the
  replication factor stays). completed: ``replicas_before``, ``replicas``
  (the target), ``reassign`` (the tool's answer), ``leader``, ``new_leader``.
``controlled-shutdown``: SIGTERM the leader's broker and wait until the JVM has
  exited (a controlled shutdown hands its leaderships over first).
  completed: ``nodes``, ``exit_s`` (seconds to exit), ``forced`` (true when it
  did not exit within the wait and was SIGKILLed), ``new_leader``.
``end-move``: undo what is pending: restart shut-down brokers, cancel a
  reassignment still in progress (``cancel``: the tool's answer) and put the
  replicas back in their first order (``restore``). With ``target`` "all" it
  also starts every broker not running (the final heal).

The reassignment is Kafka's own ReassignPartitionsCommand run on a broker's
node (confluent-kafka has no AlterPartitionReassignments).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Sequence

from broker.config import BROKER_PORT, broker_id
from broker.lifecycle import Broker
from history.ops import ACTION_START, ACTION_STOP
from infra.distribution import KAFKA_LIB
from infra.errors import UsageError

from nemesis.process import restart_down
from nemesis.protocol import NemesisContext, Op, completed, current_states, node_names, partition_leader
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

PLANNED_MOVES = "planned-moves"
ELECT_PREFERRED = "elect-preferred"
REASSIGN = "reassign-partition"
CONTROLLED_SHUTDOWN = "controlled-shutdown"
END_MOVE = "end-move"
MOVES = (ELECT_PREFERRED, REASSIGN, CONTROLLED_SHUTDOWN)

REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
JSON_PATH = "/tmp/kchaos-reassignment.json"
TOOL_TIMEOUT_S = 60.0
NEW_LEADER_WAIT_S = 15.0   # how long a move's completion waits to name the new leader
SHUTDOWN_WAIT_S = 60.0     # a controlled shutdown's allowance before SIGKILL


# -- pure: what to ask Kafka for --------------------------------------------------
def preferred_order(replicas: Sequence[int], leader: int | None, isr: Sequence[int]) -> list[int]:
    """The replicas reordered so that an in-sync follower comes first (the
    preferred replica a preferred election picks); unchanged when the leader is
    not the first replica already (the election alone moves it) or no
    follower is in sync (nothing to elect)."""
    replicas = list(replicas)
    if not replicas or replicas[0] != leader:
        return replicas
    follower = next((r for r in replicas if r != leader and r in isr), None)
    if follower is None:
        return replicas
    return [follower] + [r for r in replicas if r != follower]


def moved_replicas(replicas: Sequence[int], leader: int | None, isr: Sequence[int],
                   brokers: Sequence[int]) -> list[int]:
    """A reassignment target without the leader: its in-sync followers first
    (one becomes leader), the others, then one broker holding no replica, if
    any, in the leader's place (so the replication factor stays)."""
    rest = [r for r in replicas if r != leader]
    target = [r for r in rest if r in isr] + [r for r in rest if r not in isr]
    spare = [b for b in sorted(brokers) if b not in replicas]
    return target + spare[:1]


def reassignment_json(topic: str, assignment: dict[int, Sequence[int]]) -> str:
    """The ReassignPartitionsCommand file for ``assignment`` {partition: replicas}."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": list(r)} for p, r in sorted(assignment.items())]})


def tool_answer(text: str) -> str:
    """The tool's lines that say what it did or why not (its JSON dumps and
    "Current partition replica assignment" preamble left out)."""
    keep = [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("{")
            and not line.startswith(("Current partition replica assignment", "Save this to use",
                                     "\tat ", "at "))]
    return " | ".join(keep)[:500] or "no output"


# -- side effects ----------------------------------------------------------------
def _state(ctx: NemesisContext, value: dict[str, Any]):
    """(partition, its state as the controller sees it) for the op's target."""
    if value.get("target", "leader") != "leader":
        raise UsageError(f"planned moves act on a partition's leader (target 'leader'), got {value.get('target')!r}")
    p, _ = partition_leader(ctx, value)
    state = next((s for s in current_states(ctx.cluster, str(value.get("topic") or ctx.topic))
                  if s.partition == p), None)
    if state is None or state.leader is None:
        raise RuntimeError(f"partition {p} has no leader to move")
    return p, state


def _leader_after(ctx: NemesisContext, topic: str, p: int, old: int | None,
                  wait_s: float = NEW_LEADER_WAIT_S) -> int | None:
    """The partition's leader once it is not ``old`` (None if none other within ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = next((s for s in current_states(ctx.cluster, topic) if s.partition == p), None)
            if state is not None and state.leader is not None and state.leader != old:
                return state.leader
        except Exception as exc:  # noqa: BLE001 - a broker going down answers late; ask again
            log.debug("leader of %s-%d: %s", topic, p, exc)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.3)


def run_reassign_tool(ctx: NemesisContext, mode: str, assignment: dict[int, Sequence[int]],
                      topic: str) -> str:
    """Kafka's ReassignPartitionsCommand ``--execute`` or ``--cancel`` on the
    first running broker node; its answer (exit status and what it said)."""
    doc = reassignment_json(topic, assignment).encode()
    for node in ctx.cluster.broker_nodes:
        if not ctx.cluster.brokers[node.name].is_running():
            continue
        node.run(["sh", "-c", f"cat > {JSON_PATH}"], stdin=doc, timeout=15)
        res = node.run(["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                        "-cp", f"{KAFKA_LIB}/*", REASSIGN_TOOL,
                        "--bootstrap-server", f"{node.address}:{BROKER_PORT}",
                        "--reassignment-json-file", JSON_PATH, f"--{mode}"],
                       check=False, timeout=TOOL_TIMEOUT_S)
        return f"exit {res.exit} on {node.name}: {tool_answer(res.out + chr(10) + res.err)}"
    raise RuntimeError("no broker is running to run the reassignment tool on")


def elect_preferred(ctx: NemesisContext, topic: str, p: int) -> str | None:
    """Admin elect_leaders(PREFERRED) for one partition: None when Kafka
    elected, else its error text (e.g. ELECTION_NOT_NEEDED)."""
    # confluent_kafka is imported where a client is made, as broker.cluster does: `kchaos --help` stays light
    from confluent_kafka import ElectionType, TopicPartition
    # no timeout keywords: confluent-kafka 2.16.1's C call takes one fewer argument than its wrapper
    # passes with both; the admin's socket timeout bounds the request instead
    admin = ctx.cluster.admin(timeout_s=30.0)   # held until the answer: a collected client destroys its request
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p)])
    try:
        results = future.result(timeout=40)
    except Exception as exc:  # noqa: BLE001 - Kafka's refusal is the answer to record
        return f"{type(exc).__name__}: {exc}"
    errors = [str(err) for err in results.values() if err is not None]
    return "; ".join(errors) or None


def controlled_shutdown(broker: Broker, wait_s: float) -> dict[str, Any]:
    """SIGTERM (a controlled shutdown: the broker hands its leaderships over
    first) and wait up to ``wait_s`` for the JVM to exit, then SIGKILL."""
    broker.signal("CONT")  # a paused JVM cannot act on SIGTERM
    began = time.monotonic()
    sent = broker.signal("TERM")
    # Gone only when two looks in a row say so: a busy node's exec can miss the JVM once
    # (a run's shutdown was seen "gone" at 2.9 s, then running, and SIGKILLed as forced).
    while time.monotonic() - began < wait_s and (broker.is_running() or broker.is_running()):
        time.sleep(0.2)
    forced = broker.is_running()
    if forced:
        broker.kill()
    return {"signalled": sent, "exit_s": round(time.monotonic() - began, 3), "forced": forced}


class PlannedMovesNemesis:
    """The planned leader moves above; ``end-move`` undoes what one left pending."""

    fs = frozenset({*MOVES, END_MOVE})

    def __init__(self, ctx: NemesisContext | None = None, restart_timeout_s: float = 90.0) -> None:
        self.ctx = ctx
        self.restart_timeout_s = restart_timeout_s
        self.shut_down: set[str] = set()
        # partition -> (topic, replicas before the move, the target asked for)
        self.reassigned: dict[int, tuple[str, list[int], list[int]]] = {}
        # old leaders of the moves not yet ended: end-move names them, so it closes their fault intervals
        self.moved: set[str] = set()

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        f = op["f"]
        if f == END_MOVE:
            out, errors = self._end(value)
            return completed(op, out, errors, action=ACTION_STOP)
        if f not in MOVES:
            raise ValueError(f"PlannedMovesNemesis cannot do {f!r}")
        topic = str(value.get("topic") or self.ctx.topic or "")
        p, state = _state(self.ctx, value)
        out: dict[str, Any] = {"fault": PLANNED_MOVES, "move": f, "target": "leader", "partition": p,
                               "leader": f"n{state.leader}", "nodes": [f"n{state.leader}"],
                               "replicas_before": list(state.replicas), "isr": list(state.isr)}
        for key in ("seed", "partition_index"):
            if value.get(key) is not None:
                out[key] = value[key]
        if f == ELECT_PREFERRED:
            order = preferred_order(state.replicas, state.leader, state.isr)
            out["replicas"] = order
            if order != list(state.replicas):
                out["reorder"] = run_reassign_tool(self.ctx, "execute", {p: order}, topic)
                time.sleep(1.0)  # the controller applies the new order before the election reads it
            out["election"] = elect_preferred(self.ctx, topic, p)
        elif f == REASSIGN:
            brokers = [broker_id(n.name) for n in self.ctx.cluster.broker_nodes]
            target = moved_replicas(state.replicas, state.leader, state.isr, brokers)
            out["replicas"] = target
            out["reassign"] = run_reassign_tool(self.ctx, "execute", {p: target}, topic)
            self.reassigned[p] = (topic, list(state.replicas), target)
        else:
            out.update(self._shutdown(f"n{state.leader}"))
        self.moved.add(f"n{state.leader}")
        new = _leader_after(self.ctx, topic, p, state.leader)
        out["new_leader"] = f"n{new}" if new is not None else None
        return completed(op, out, None, action=ACTION_START)

    def _shutdown(self, name: str) -> dict[str, Any]:
        self.shut_down.add(name)
        return controlled_shutdown(self.ctx.cluster.brokers[name], SHUTDOWN_WAIT_S)

    def _end(self, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        out: dict[str, Any] = {"fault": PLANNED_MOVES}
        errors: dict[str, str] = {}
        if self.shut_down or value.get("target") == "all":
            restarted, errors = restart_down(self.ctx.cluster, self.shut_down, value, PLANNED_MOVES,
                                             self.restart_timeout_s)
            out.update(restarted)
        for p, (topic, before, target) in sorted(self.reassigned.items()):
            try:
                out.setdefault("cancel", {})[str(p)] = run_reassign_tool(self.ctx, "cancel", {p: target}, topic)
                out.setdefault("restore", {})[str(p)] = run_reassign_tool(self.ctx, "execute", {p: before}, topic)
                out.setdefault("replicas", {})[str(p)] = before
            except Exception as exc:  # noqa: BLE001 - reported per partition, the rest still undone
                errors[f"partition {p}"] = f"{type(exc).__name__}: {exc}"
        self.reassigned.clear()
        named = set(out.get("nodes", ())) | self.moved
        if value.get("target") == "all":
            named |= set(node_names(self.ctx.cluster))
        out["nodes"] = sort_nodes(named)
        self.moved.clear()
        return out, errors

    def teardown(self) -> None:
        if self.ctx is not None:
            self._end({"target": "all"})
