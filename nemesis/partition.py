"""Network partitions as iptables rules in a chain of kchaos's own.

On each node the ``KCHAOS`` chain is hooked first into INPUT and holds one
DROP rule per peer it must not hear from (see nemesis.topology). Healing
unhooks, flushes and deletes that chain only: the node's other rules are left
alone. The harness host (where the clients run) is a peer only in the
client topologies (``client-cut-node``, ``client-cut-leader``,
``client-only-leader``): there a broker drops, on its client port, packets
from the address the host's packets to it carry (on Docker, the run
network's gateway; found with the host's own routing, ``client_address``).
"""
from __future__ import annotations

import logging
import socket
from typing import Any, Sequence

import networkx as nx

from history.ops import ACTION_START, ACTION_STOP
from infra.errors import UsageError
from infra.node import Node, shell_join
from nemesis import topology as topo
from nemesis.protocol import NemesisContext, Op, completed, each, node_names, op_rng, partition_leader, resolve_nodes
from nemesis.roles import ROLE_KEYS, ROLE_TARGETS

log = logging.getLogger(__name__)

CHAIN = "KCHAOS"
FAULT = "partition"
TOPOLOGIES = ("isolate-node", "isolate-leader", "isolate-controller", "halves", "majorities-ring",
              "bridge", "one-way", "client-cut-node", "client-cut-leader", "client-only-leader")
CLIENT_TOPOLOGIES = ("client-cut-node", "client-cut-leader", "client-only-leader")
START_PARTITION, STOP_PARTITION = "start-partition", "stop-partition"


def _ipt(*args: str) -> str:
    return shell_join(["iptables", "-w", *args])


def install_script(rule_args: Sequence[Sequence[str]]) -> str:
    """Shell script: (re)create the chain, hook it into INPUT once, fill it."""
    lines = [
        "set -e",
        f"{_ipt('-N', CHAIN)} 2>/dev/null || true",
        _ipt("-F", CHAIN),
        f"{_ipt('-C', 'INPUT', '-j', CHAIN)} 2>/dev/null || {_ipt('-I', 'INPUT', '-j', CHAIN)}",
    ]
    lines += [_ipt("-A", CHAIN, *args) for args in rule_args]
    return "\n".join(lines)


def heal_script() -> str:
    """Shell script: unhook (every copy of the jump), flush and delete the chain;
    fails if the chain is still there afterwards."""
    return "\n".join([
        f"n=0; while {_ipt('-D', 'INPUT', '-j', CHAIN)} 2>/dev/null && [ $n -lt 20 ]; do n=$((n+1)); done",
        f"{_ipt('-F', CHAIN)} 2>/dev/null || true",
        f"{_ipt('-X', CHAIN)} 2>/dev/null || true",
        f"if {_ipt('-n', '-L', CHAIN)} >/dev/null 2>&1; then echo 'chain {CHAIN} still present' >&2; exit 1; fi",
    ])


def heal_node(node: Node, timeout: float = 30.0) -> None:
    node.run(["sh", "-c", heal_script()], timeout=timeout)


def chain_rules(node: Node) -> list[str] | None:
    """The KCHAOS chain's rules on a node (``iptables -S`` lines), None if absent."""
    res = node.run(["iptables", "-w", "-S", CHAIN], check=False, timeout=30)
    if res.exit != 0:
        return None
    return [line for line in res.out.splitlines() if line.startswith("-A ")]


def client_address(node: Node) -> str:
    """The source address of the harness host's packets to ``node``: the local
    end of the host's route to it (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((node.address, 9))
        return s.getsockname()[0]


def _one_node(ctx: NemesisContext, value: dict[str, Any]) -> list[str]:
    """The node of ``node``, a role target (nemesis.roles), ``node_index`` or a seeded random draw."""
    if value.get("target") in ROLE_TARGETS:
        nodes, _ = resolve_nodes(ctx, {k: value.get(k) for k in ROLE_KEYS})
        return nodes
    target = value.get("node")
    spec = {"target": "node", "node": target} if target else \
        {"target": "node", "node_index": value["node_index"]} if value.get("node_index") is not None else \
        {"target": "random", "seed": value.get("seed")}
    nodes, _ = resolve_nodes(ctx, spec)
    return nodes


def resolve_graph(ctx: NemesisContext, value: dict[str, Any]) -> tuple[nx.DiGraph, dict[str, Any]]:
    """The reachability graph an op asks for, and the details that name it."""
    names = node_names(ctx.cluster)
    kind = value.get("topology", "isolate-node")
    details: dict[str, Any] = {"topology": kind}
    if kind in ("bridge", "majorities-ring") and len(names) < 3:
        kind = "halves"  # both need 3 nodes; with fewer, halves is the nearest cut
        details["topology"] = kind
        details["requested"] = value.get("topology")
    if kind == "isolate-node":
        nodes = _one_node(ctx, value)
        if value.get("target") in ROLE_TARGETS:
            details["target"] = value["target"]
            if not nodes:  # no active controller right now: nothing to isolate
                return topo.complete(names), details
        details["isolated"] = nodes
        return topo.isolate(names, nodes), details
    if kind == "client-cut-node":
        nodes = _one_node(ctx, value)
        g = topo.client_cut(names, nodes)
        details.update(cut=nodes, client_reaches=topo.client_reaches(g))
        return g, details
    if kind in ("client-cut-leader", "client-only-leader"):
        p, leader = partition_leader(ctx, value)
        details.update(partition=p, leader=leader, topic=value.get("topic") or ctx.topic)
        if leader is None:  # no leader to cut the clients from (or to keep)
            return topo.complete(names), details
        g = topo.client_cut(names, leader) if kind == "client-cut-leader" else topo.client_only(names, leader)
        details["client_reaches"] = topo.client_reaches(g)
        return g, details
    if kind == "isolate-leader":
        p, leader = partition_leader(ctx, value)
        details.update(partition=p, leader=leader, topic=value.get("topic") or ctx.topic)
        if leader is None:
            return topo.complete(names), details
        details["isolated"] = [leader]
        return topo.isolate(names, leader), details
    if kind == "isolate-controller":
        nodes, d = resolve_nodes(ctx, {"target": "controller"})
        details["controller"] = d.get("controller")
        if not nodes:
            return topo.complete(names), details
        details["isolated"] = nodes
        return topo.isolate(names, nodes), details
    rng = op_rng(ctx, value)
    if kind == "halves":
        g = topo.halves(names, rng)
        details["groups"] = topo.halves_groups(g)
        return g, details
    if kind == "majorities-ring":
        g = topo.majorities_ring(names, rng)
        details["sees"] = {v: topo.sort_nodes(topo.sees(g, v)) for v in names}
        return g, details
    if kind == "bridge":
        g = topo.bridge(names, rng)
        details["groups"] = topo.halves_groups(g)
        details["bridge"] = topo.bridge_node(g)
        return g, details
    if kind == "one-way":
        receiver = value.get("node")
        if receiver is None:
            if value.get("target") is not None:
                spec = {k: value[k] for k in ("target", "partition", "partition_index", "topic", "seed")
                        if value.get(k) is not None}
            elif value.get("node_index") is not None:
                spec = {"target": "node", "node_index": value["node_index"]}
            else:
                spec = {"target": "random", "seed": value.get("seed")}
            resolved, d = resolve_nodes(ctx, spec)
            details.update({k: v for k, v in d.items() if k != "target"})
            if not resolved:  # no leader or controller right now: nothing to cut
                return topo.complete(names), details
            receiver = resolved[0]
        receiver = ctx.cluster.node(str(receiver)).name
        senders = value.get("from")
        if senders is not None:
            senders = [ctx.cluster.node(str(s)).name for s in senders]
        g = topo.one_way(names, receiver, senders)
        details.update(receiver=receiver, senders=topo.sort_nodes(g.nodes - set(g.predecessors(receiver)) - {receiver}))
        return g, details
    raise UsageError(f"unknown topology {kind!r}; choose one of {', '.join(TOPOLOGIES)}")


class PartitionNemesis:
    """``start-partition`` (value: ``topology`` plus its target keys, optional
    ``ports``) and ``stop-partition`` (heals every node)."""

    fs = frozenset({START_PARTITION, STOP_PARTITION})

    def __init__(self, ctx: NemesisContext | None = None) -> None:
        # Given a context here, the nemesis can act without setup() (which heals).
        self.ctx = ctx

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx
        each(heal_node, ctx.cluster.nodes, key=lambda n: n.name)

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        if op["f"] == STOP_PARTITION:
            return self._stop(op)
        if op["f"] != START_PARTITION:
            raise ValueError(f"PartitionNemesis cannot do {op['f']!r}")
        return self._start(op, value)

    def _start(self, op: Op, value: dict[str, Any]) -> Op:
        cluster = self.ctx.cluster
        graph, details = resolve_graph(self.ctx, value)
        ports = [int(p) for p in value["ports"]] if value.get("ports") else None
        by_node = topo.rules(graph, ports)
        address = {n.name: n.address for n in cluster.nodes}
        client = {n.name: client_address(n) for n in cluster.nodes
                  if any(r.source == topo.CLIENT for r in by_node.get(n.name, []))}

        def addr(holder: str, source: str) -> str:
            return client[holder] if source == topo.CLIENT else address[source]

        def apply(node: Node) -> None:
            node_rules = by_node.get(node.name, [])
            if node_rules:
                node.run(["sh", "-c", install_script([r.iptables_args(addr(node.name, r.source))
                                                      for r in node_rules])],
                         timeout=30)
            else:
                heal_node(node)

        _, errors = each(apply, cluster.nodes, key=lambda n: n.name)
        affected = topo.sort_nodes(n for n, lst in by_node.items() if lst)
        out = {"fault": FAULT, **details, "nodes": affected,
               "grudge": {n: topo.sort_nodes(peers) for n, peers in topo.grudge(graph).items() if peers},
               "rules": {n: [r.describe(addr(n, r.source)) for r in lst] for n, lst in by_node.items() if lst}}
        if ports:
            out["ports"] = sorted(set(ports))
        for key in ("seed", "node_index", "partition_index"):
            if value.get(key) is not None:
                out[key] = value[key]
        return completed(op, out, errors, action=ACTION_START)

    def _stop(self, op: Op) -> Op:
        nodes = self.ctx.cluster.nodes
        healed, errors = each(heal_node, nodes, key=lambda n: n.name)
        return completed(op, {"fault": FAULT, "nodes": topo.sort_nodes(healed)}, errors, action=ACTION_STOP)

    def teardown(self) -> None:
        if self.ctx is not None:
            _, errors = each(heal_node, self.ctx.cluster.nodes, key=lambda n: n.name)
            if errors:
                log.warning("partition heal failed on %s", errors)
