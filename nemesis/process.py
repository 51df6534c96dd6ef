"""Broker process faults: SIGKILL then restart, SIGSTOP then SIGCONT.

Targets are resolved by nemesis.protocol.resolve_nodes ("random", "leader" of a
partition, "controller", "minority", "all", a node name, a node index).
"""
from __future__ import annotations

import logging
import time
from typing import Any

from broker.cluster import KafkaCluster
from history.ops import ACTION_START, ACTION_STOP

from nemesis.protocol import NemesisContext, Op, completed, each, node_names, resolve_nodes
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

# op names. RESTART ends the kill fault (its action is ACTION_STOP); its name
# stays "start", as every recorded history has it.
KILL, RESTART = "kill", "start"
PAUSE, RESUME = "pause", "resume"


def ensure_running(cluster: KafkaCluster, name: str, timeout_s: float = 90.0) -> bool:
    """Start the broker on ``name`` unless it runs; True if it had to be started.

    The process check is repeated before a restart: KafkaCluster.restart waits
    for a *new* "started" line, so restarting a broker that in fact runs would
    wait out its whole timeout.
    """
    broker = cluster.brokers[name]
    for attempt in range(2):
        if broker.is_running():
            return False
        if attempt == 0:
            time.sleep(0.5)
    cluster.restart(name, timeout_s)
    return True


def restart_down(cluster: KafkaCluster, down: set[str], value: dict[str, Any], fault: str,
                 timeout_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    """Heal a fault that took brokers down (kill, power loss): start again those
    in ``down`` (plus every node with ``target`` "all", and ``nodes``), each
    waited for; those started leave ``down``. The completion's value (the nodes
    healed, those that had to be started) and the errors."""
    wanted = set(down)
    if value.get("target") == "all":
        wanted |= set(node_names(cluster))
    if value.get("nodes"):
        wanted |= set(value["nodes"])
    started, errors = each(lambda n: ensure_running(cluster, n, timeout_s), sort_nodes(wanted))
    down.difference_update(started)
    out = {"fault": fault, "nodes": sort_nodes(wanted),
           "restarted": sort_nodes([n for n, did in started.items() if did] + list(errors))}
    if value.get("target"):
        out["target"] = value["target"]
    return out, errors


def stop_start(cluster: KafkaCluster, name: str, timeout_s: float = 90.0) -> None:
    """A clean restart (SIGTERM, then start): fresh JVM timers, e.g. after a clock
    was set back (Kafka's timers run on wall time and stall when it goes back)."""
    cluster.brokers[name].stop()
    cluster.restart(name, timeout_s)


def _target_value(value: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in details.items() if v is not None or k in ("leader", "controller")}
    for key in ("seed", "node_index", "partition_index"):
        if value.get(key) is not None:
            out[key] = value[key]
    return out


class KillNemesis:
    """``kill``: SIGKILL the broker JVM on the targets (waits until it is gone).
    ``start``: restart the brokers this nemesis killed; with ``target`` "all",
    every broker that is not running. Waits until each logged that it started."""

    fs = frozenset({KILL, RESTART})

    def __init__(self, ctx: NemesisContext | None = None, restart_timeout_s: float = 90.0) -> None:
        self.ctx = ctx
        self.killed: set[str] = set()
        self.restart_timeout_s = restart_timeout_s

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        if op["f"] == KILL:
            nodes, details = resolve_nodes(self.ctx, value)
            brokers = self.ctx.cluster.brokers
            results, errors = each(lambda n: brokers[n].kill(), nodes)
            killed = sort_nodes(n for n, was_running in results.items() if was_running)
            self.killed |= set(results)
            out = {"fault": KILL, **_target_value(value, details), "nodes": sort_nodes(results)}
            if killed != out["nodes"]:
                out["were_running"] = killed
            return completed(op, out, errors, action=ACTION_START)
        if op["f"] == RESTART:
            return self._start(op, value)
        raise ValueError(f"KillNemesis cannot do {op['f']!r}")

    def _start(self, op: Op, value: dict[str, Any]) -> Op:
        out, errors = restart_down(self.ctx.cluster, self.killed, value, KILL, self.restart_timeout_s)
        return completed(op, out, errors, action=ACTION_STOP)

    def teardown(self) -> None:
        if self.ctx is not None:
            self._start({"f": RESTART}, {"target": "all"})


class PauseNemesis:
    """``pause``: SIGSTOP the broker JVM on the targets. ``resume``: SIGCONT to
    every broker (harmless where none is paused)."""

    fs = frozenset({PAUSE, RESUME})

    def __init__(self, ctx: NemesisContext | None = None) -> None:
        self.ctx = ctx
        self.paused: set[str] = set()

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        brokers = self.ctx.cluster.brokers
        if op["f"] == PAUSE:
            nodes, details = resolve_nodes(self.ctx, value)
            results, errors = each(lambda n: brokers[n].pause(), nodes)
            self.paused |= set(results)
            out = {"fault": PAUSE, **_target_value(value, details), "nodes": sort_nodes(results)}
            stopped = sort_nodes(n for n, ok in results.items() if ok)
            if stopped != out["nodes"]:
                out["were_running"] = stopped
            return completed(op, out, errors, action=ACTION_START)
        if op["f"] == RESUME:
            names = node_names(self.ctx.cluster)
            results, errors = each(lambda n: brokers[n].resume(), names)
            out = {"fault": PAUSE, "nodes": sort_nodes(results),
                   "resumed": sort_nodes(n for n in self.paused if n in results)}
            self.paused -= set(results)
            return completed(op, out, errors, action=ACTION_STOP)
        raise ValueError(f"PauseNemesis cannot do {op['f']!r}")

    def teardown(self) -> None:
        if self.ctx is not None:
            each(lambda b: b.resume(), self.ctx.cluster.brokers.values(), key=lambda b: b.name)
            self.paused.clear()
