"""Slow and lossy links: delay, jitter, loss and reordering, with ``tc netem``
where the kernel has it, else with iptables and an NFQUEUE delayer.

netem shapes what a node *sends*, so a fault names the nodes whose outgoing
packets it shapes (target keys as kill takes them) and which of their links:

* ``links`` "all": every packet the node sends, on the interface that routes
  to its peers (its replies to the clients too): ``tc qdisc replace dev D
  root handle 4b43: netem ...``;
* "peers", "client" or a list of node names and/or "client": only packets
  to those addresses: a ``prio`` qdisc with a fourth band (``4b43:``, whose
  priomap keeps ordinary traffic in bands 1-3), ``netem`` on that band
  (``4b44:``), and one ``u32`` filter per destination address sending its
  packets there. "client" is the harness host's address as the node sees it
  (``nemesis.partition.client_address``).

A shaped link u -> v delays and drops only u's packets to v (the iptables
path delays v's packets to u instead, see ``nemesis.netem_iptables``), but
every round trip between them crosses it once, so the round trip grows by the
delay either way. A new start on a node replaces its shaping. Healing needs
no state: it deletes the root qdisc of an interface only when its handle is
``4b43:`` (ours), on every interface, and removes the iptables path's chains
and delayer; ``heal_script`` is also part of
``nemesis.packages.heal_node_script`` (``kchaos nemesis heal``, interrupted
runs, ``kchaos clean --inventory``; Docker containers go with their qdiscs,
rules and processes).

Needs NET_ADMIN in the node. ``mechanism`` "netem" needs a kernel with
``sch_netem`` (and, for per-link shaping, ``sch_prio`` and ``cls_u32``);
"iptables" (``nemesis.netem_iptables``) needs the ``statistic`` match for
loss, and for delay the ``NFQUEUE`` target and python3 on the node; "auto"
(the default) tries netem on each node and falls back to iptables when the
kernel lacks a qdisc. The completion names each node's mechanism. A node
where neither works fails the op with one line, and nothing stays behind.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

from history.ops import ACTION_START, ACTION_STOP
from infra.errors import UsageError
from infra.node import Node, shell_join
from nemesis import netem_iptables as ipt
from nemesis import topology as topo
from nemesis.protocol import NemesisContext, Op, completed, each, resolve_nodes
from nemesis.partition import client_address
from nemesis.roles import ROLE_KEYS

log = logging.getLogger(__name__)

FAULT = "netem"
START_NETEM, STOP_NETEM = "start-netem", "stop-netem"
ROOT = "4b43:"
BAND = "4b43:4"
LEAF = "4b44:"
LINKS = ("all", "peers", "client")
MECHANISMS = ("auto", "netem", "iptables")
NO_QDISC_EXIT = 3  # install_script's exit when the kernel lacks a qdisc
MAX_DELAY_MS = 60_000.0
NO_NETEM = "kchaos: this kernel has no netem qdisc"


class NetemFailed(RuntimeError):
    """The shaping failed on a node (e.g. a kernel without sch_netem and mechanism "netem")."""


@dataclass(frozen=True)
class Shape:
    """What netem does to each shaped packet."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    reorder_pct: float = 0.0

    def netem_args(self) -> list[str]:
        args: list[str] = []
        if self.delay_ms:
            args += ["delay", f"{self.delay_ms:g}ms"] + ([f"{self.jitter_ms:g}ms"] if self.jitter_ms else [])
        if self.loss_pct:
            args += ["loss", f"{self.loss_pct:g}%"]
        if self.reorder_pct:
            args += ["reorder", f"{self.reorder_pct:g}%"]
        return args

    def as_value(self) -> dict[str, float]:
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms, "loss_pct": self.loss_pct,
                "reorder_pct": self.reorder_pct}


def shape_of(value: dict[str, Any]) -> Shape:
    """The shape an op asks for; UsageError (one line) when out of range."""
    def num(key: str) -> float:
        raw = value.get(key, 0) or 0
        try:
            x = float(raw)
        except (TypeError, ValueError):
            raise UsageError(f"netem {key} must be a number, got {raw!r}") from None
        if not math.isfinite(x):
            raise UsageError(f"netem {key} must be finite, got {raw!r}")
        return x

    s = Shape(num("delay_ms"), num("jitter_ms"), num("loss_pct"), num("reorder_pct"))
    if not 0 <= s.delay_ms <= MAX_DELAY_MS:
        raise UsageError(f"netem delay must be between 0 and {MAX_DELAY_MS:g} ms, got {s.delay_ms:g}")
    if not 0 <= s.jitter_ms <= s.delay_ms:
        raise UsageError(f"netem jitter must be between 0 and the delay ({s.delay_ms:g} ms), got {s.jitter_ms:g}")
    for key, x in (("loss", s.loss_pct), ("reorder", s.reorder_pct)):
        if not 0 <= x <= 100:
            raise UsageError(f"netem {key} must be a percentage between 0 and 100, got {x:g}")
    if s.reorder_pct and not s.delay_ms:
        raise UsageError("netem reordering needs a delay (reordered packets are the ones not delayed)")
    if not (s.delay_ms or s.loss_pct):
        raise UsageError("netem needs a delay or a loss: with neither it changes nothing")
    return s


def links_of(value: dict[str, Any]) -> str | list[str]:
    """``links`` as "all" | "peers" | "client" | [names and/or "client"]; UsageError otherwise."""
    links = value.get("links", "all")
    if isinstance(links, str) and "," in links:
        links = [x.strip() for x in links.split(",") if x.strip()]
    if isinstance(links, str):
        if links in LINKS:
            return links
        links = [links]
    if not isinstance(links, (list, tuple)) or not links:
        raise UsageError(f"netem links must be one of {', '.join(LINKS)} or node names, got {links!r}")
    out = []
    for x in links:
        if not isinstance(x, str) or not (x == topo.CLIENT or (x[:1] == "n" and x[1:].isdigit())):
            raise UsageError(f"unknown netem link {x!r}; valid: {', '.join(LINKS)}, "
                             f"or node names (n1, n2, ...) and {topo.CLIENT}")
        out.append(x)
    return sorted(set(out), key=lambda n: (n == topo.CLIENT, len(n), n))


def mechanism_of(value: dict[str, Any]) -> str:
    m = value.get("mechanism") or "auto"
    if m not in MECHANISMS:
        raise UsageError(f"unknown netem mechanism {m!r}; choose one of {', '.join(MECHANISMS)}")
    return m


# -- scripts -----------------------------------------------------------------------
def _tc(*args: str) -> str:
    return shell_join(["tc", *args])


def _dev_line(route_to: str) -> str:
    return (f"dev=$(ip -o route get {shell_join([route_to])} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p' | head -n 1)\n"
            f"[ -n \"$dev\" ] || {{ echo 'no route to {route_to}' >&2; exit 1; }}")


def tc_heal_script() -> str:
    """Shell script: on every interface, delete the root qdisc if it is ours
    (handle 4b43:); fails if one is left."""
    mine = f"tc qdisc show dev \"$d\" 2>/dev/null | grep -q '^qdisc [a-z_]* {ROOT} root'"
    return "\n".join([
        "command -v tc >/dev/null 2>&1 || exit 0",
        "rc=0",
        "for d in $(ls /sys/class/net); do",
        f"  if {mine}; then tc qdisc del dev \"$d\" root 2>/dev/null || true; fi",
        f"  if {mine}; then echo \"netem qdisc still on $d\" >&2; rc=1; fi",
        "done",
        "exit $rc",
    ])


def heal_script() -> str:
    """Shell script: remove both mechanisms' leftovers (our qdiscs; our chains
    and the delayer); fails if any is left."""
    return f"rc=0\n( {tc_heal_script()} ) || rc=1\n( {ipt.heal_script()} ) || rc=1\nexit $rc"


def install_script(shape: Shape, route_to: str, destinations: Sequence[str] | None) -> str:
    """Shell script: replace this node's shaping with ``shape`` on the interface
    routing to ``route_to``; on every packet (destinations None) or only on
    packets to ``destinations`` (addresses). Leaves nothing when it fails."""
    netem = shell_join(shape.netem_args())
    if destinations is None:
        cmds = [f"tc qdisc add dev \"$dev\" root handle {ROOT} netem {netem}"]
    else:
        cmds = [f"tc qdisc add dev \"$dev\" root handle {ROOT} prio bands 4 "
                "priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1",
                f"tc qdisc add dev \"$dev\" parent {BAND} handle {LEAF} netem {netem}"]
        cmds += [f"tc filter add dev \"$dev\" parent {ROOT} protocol ip prio 1 u32 "
                 f"match ip dst {shell_join([addr + '/32'])} flowid {BAND}" for addr in destinations]
    lines = [_dev_line(route_to), f"( {heal_script()} ) >/dev/null 2>&1 || true",
             "out=$( { " + " && ".join(cmds) + "; } 2>&1 ) && exit 0",
             f"( {tc_heal_script()} ) >/dev/null 2>&1 || true",
             f"case \"$out\" in *'kind is unknown'*|*'Unknown qdisc'*) echo \"{NO_NETEM} "
             f"(sch_netem, sch_prio; tc said: $out)\" >&2; exit {NO_QDISC_EXIT};; esac",
             "echo \"$out\" >&2", "exit 1"]
    return "\n".join(lines)


def _last_line(text: str, default: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else default


def heal_node(node: Node, timeout: float = 30.0) -> None:
    node.run(["sh", "-c", heal_script()], timeout=timeout)


def qdiscs(node: Node) -> list[str]:
    """Our qdiscs on the node (``tc qdisc show`` lines naming 4b43: or 4b44:)."""
    out = node.run(["sh", "-c", "command -v tc >/dev/null 2>&1 && tc qdisc show || true"], timeout=30).out
    return [line.strip() for line in out.splitlines() if f" {ROOT} " in line or f" {LEAF} " in line]


class NetemNemesis:
    """``start-netem`` (value: target keys as kill, ``links``, ``delay_ms``,
    ``jitter_ms``, ``loss_pct``, ``reorder_pct``, ``mechanism``) and
    ``stop-netem`` (every node healed, both mechanisms)."""

    fs = frozenset({START_NETEM, STOP_NETEM})

    def __init__(self, ctx: NemesisContext | None = None) -> None:
        self.ctx = ctx

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx
        each(heal_node, ctx.cluster.nodes, key=lambda n: n.name)

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        if op["f"] == STOP_NETEM:
            healed, errors = each(heal_node, self.ctx.cluster.nodes, key=lambda n: n.name)
            return completed(op, {"fault": FAULT, "nodes": topo.sort_nodes(healed)}, errors, action=ACTION_STOP)
        if op["f"] != START_NETEM:
            raise ValueError(f"NetemNemesis cannot do {op['f']!r}")
        return self._start(op, dict(op.get("value") or {}))

    def _start(self, op: Op, value: dict[str, Any]) -> Op:
        cluster = self.ctx.cluster
        shape = shape_of(value)
        links = links_of(value)
        mechanism = mechanism_of(value)
        if isinstance(links, list):
            for name in links:
                if name != topo.CLIENT:
                    cluster.node(name)  # UsageError for an unknown node
        spec = {k: value[k] for k in ("node", "partition") + ROLE_KEYS if value.get(k) is not None}
        names, details = resolve_nodes(self.ctx, spec or {"target": "random"})
        by_name = {n.name: n for n in cluster.nodes}

        def destinations(node: Node) -> list[str] | None:
            if links == "all":
                return None
            wanted = [n for n in by_name if n != node.name] if links == "peers" else \
                [topo.CLIENT] if links == "client" else [n for n in links if n != node.name]
            return [client_address(node) if n == topo.CLIENT else by_name[n].address for n in wanted]

        resolved: dict[str, list[str] | None] = {}
        used: dict[str, str] = {}
        delayers: dict[str, int] = {}
        seed = value.get("seed")

        def apply(node: Node) -> None:
            dests = destinations(node)
            resolved[node.name] = dests
            if dests == []:
                return  # a link to itself only: nothing to shape
            peer = next((n.address for n in cluster.nodes if n.name != node.name), None)
            route_to = (dests or [None])[0] or peer or client_address(node)
            if mechanism != "iptables":
                res = node.run(["sh", "-c", install_script(shape, route_to, dests)], check=False, timeout=30)
                if res.exit == 0:
                    used[node.name] = "netem"
                    return
                if mechanism == "netem" or res.exit != NO_QDISC_EXIT:
                    raise NetemFailed(_last_line(res.err or res.out, f"exit {res.exit}"))
            heal_node(node)
            try:
                pid = ipt.install(node, shape.loss_pct, shape.delay_ms, shape.jitter_ms, shape.reorder_pct, dests,
                                  _dev_line(route_to), seed if isinstance(seed, int) else None)
            except Exception as exc:
                try:
                    heal_node(node)
                finally:
                    err = getattr(exc, "err", "") or str(exc)
                    raise NetemFailed(_last_line(err, type(exc).__name__)) from exc
            used[node.name] = "iptables"
            if pid is not None:
                delayers[node.name] = pid

        _, errors = each(apply, [by_name[n] for n in names], key=lambda n: n.name)
        out = {"fault": FAULT, **{k: v for k, v in details.items() if v is not None or k in ("leader", "controller")},
               "nodes": topo.sort_nodes(names), "links": links, **shape.as_value(),
               "to": {n: ("all" if d is None else d) for n, d in sorted(resolved.items())},
               "mechanism": dict(sorted(used.items()))}
        if delayers:
            out["delayer_pid"] = dict(sorted(delayers.items()))
        for key in ("seed", "node_index", "partition_index"):
            if value.get(key) is not None:
                out[key] = value[key]
        return completed(op, out, errors, action=ACTION_START)

    def teardown(self) -> None:
        if self.ctx is not None:
            _, errors = each(heal_node, self.ctx.cluster.nodes, key=lambda n: n.name)
            if errors:
                log.warning("netem heal failed on %s", errors)
