"""The Nemesis protocol, its context, composition, and target resolution.

A nemesis handles a fixed set of op names (``fs``). ``invoke`` takes an op
``{"f": ..., "value": {...}}`` whose value names targets abstractly (``target``
"random", "leader" of ``partition``, "controller", "minority", "all", a role
of nemesis.roles, a node name, or ``node_index``; ``seed`` for random draws) and returns the completed
op: the same op with ``type`` "info" and a value naming what was actually done
(at least ``nodes``, the node names affected, ``fault``, the fault kind, and
``action``: whether the op starts, stops or heals it; see history.ops). Failures on some nodes are reported in ``value["errors"]`` and the op's
``error``; a nemesis raises only when nothing could be done (the runner turns
that into an info completion with the error).
"""
from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar, runtime_checkable

from broker.cluster import KafkaCluster
from infra.errors import UsageError
from nemesis.roles import ROLE_TARGETS, resolve_role
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

Op = dict[str, Any]
T = TypeVar("T")

TARGETS = ("random", "leader", "controller", "minority", "all")


@dataclass
class NemesisContext:
    cluster: KafkaCluster
    topic: str | None
    rng: random.Random


@runtime_checkable
class Nemesis(Protocol):
    fs: frozenset[str]

    def setup(self, ctx: NemesisContext) -> None:
        """Prepare, and clear any leftover of this kind of fault (idempotent)."""
        ...

    def invoke(self, op: Op) -> Op:
        """Do the op; return the completed op (type "info", resolved value
        naming its ``action`` and ``fault``)."""
        ...

    def teardown(self) -> None:
        """Heal everything this nemesis may have done."""
        ...


class UnknownNemesisOp(ValueError):
    """An op name no nemesis of this composition handles (a schedule bug)."""


class ComposedNemesis:
    """Several nemeses as one, dispatching each op by its ``f``."""

    def __init__(self, nemeses: Sequence[Nemesis]):
        self.nemeses = list(nemeses)
        self._by_f: dict[str, Nemesis] = {}
        for nem in self.nemeses:
            for f in nem.fs:
                if f in self._by_f:
                    raise ValueError(f"op {f!r} is handled by both {type(self._by_f[f]).__name__} "
                                     f"and {type(nem).__name__}")
                self._by_f[f] = nem
        self.fs = frozenset(self._by_f)

    def setup(self, ctx: NemesisContext) -> None:
        for nem in self.nemeses:
            nem.setup(ctx)

    def invoke(self, op: Op) -> Op:
        nem = self._by_f.get(op.get("f"))
        if nem is None:
            raise UnknownNemesisOp(f"no nemesis handles {op.get('f')!r} (handled: {', '.join(sorted(self.fs))})")
        return nem.invoke(op)

    def teardown(self) -> None:
        errors = []
        for nem in self.nemeses:
            try:
                nem.teardown()
            except Exception as exc:  # heal the rest, then report
                log.warning("teardown of %s failed: %s", type(nem).__name__, exc)
                errors.append(exc)
        if errors:
            raise errors[0]


def compose(nemeses: Iterable[Nemesis]) -> ComposedNemesis:
    return ComposedNemesis(list(nemeses))


def completed(op: Op, value: dict[str, Any], errors: dict[str, str] | None = None, *,
              action: str | None) -> Op:
    """The completion of ``op``: same fields, type "info", the resolved value
    with its ``action`` (start, stop, heal, or None for bookkeeping) stated, so
    that readers never guess it from the op's name (history.ops)."""
    out = {k: v for k, v in op.items() if k not in ("index", "time", "error")}
    value = {**value, "action": action}
    if errors:
        value["errors"] = dict(sorted(errors.items()))
        out["error"] = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
    out["type"] = "info"
    out["value"] = value
    return out


def each(fn: Callable[[T], Any], items: Iterable[T], key: Callable[[T], str] = str) -> tuple[dict[str, Any], dict[str, str]]:
    """Run fn on every item in parallel: ({key: result}, {key: error text})."""
    items = list(items)
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if not items:
        return results, errors

    def call(item):
        try:
            return key(item), fn(item), None
        except Exception as exc:
            return key(item), None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        for k, res, err in pool.map(call, items):
            if err is None:
                results[k] = res
            else:
                errors[k] = err
    return results, errors


# -- targets --------------------------------------------------------------------
def node_names(cluster: KafkaCluster) -> list[str]:
    return sort_nodes(n.name for n in cluster.nodes)


def op_rng(ctx: NemesisContext, value: dict[str, Any]) -> random.Random:
    """A seeded draw when the op carries ``seed`` (plans do), else the context's rng."""
    seed = value.get("seed")
    return random.Random(seed) if seed is not None else ctx.rng


def partition_leader(ctx: NemesisContext, value: dict[str, Any]) -> tuple[int, str | None]:
    """(partition, leader node name or None) of ctx.topic (or value["topic"])."""
    topic = value.get("topic") or ctx.topic
    if not topic:
        raise UsageError("targeting a partition leader needs a topic (--topic)")
    states = current_states(ctx.cluster, topic)
    if not states:
        raise UsageError(f"topic {topic!r} does not exist or has no partitions")
    if value.get("partition") is not None:
        p = int(value["partition"])
    elif value.get("partition_index") is not None:
        p = states[int(value["partition_index"]) % len(states)].partition
    else:
        p = op_rng(ctx, value).choice(states).partition
    state = next((s for s in states if s.partition == p), None)
    if state is None:
        raise UsageError(f"topic {topic!r} has no partition {p}")
    return p, (f"n{state.leader}" if state.leader is not None else None)


def current_states(cluster: KafkaCluster, topic: str):
    """Partition states as the active controller sees them; any broker's view
    only when the controller cannot answer (an isolated broker's is stale)."""
    controller = cluster.active_controller()
    if controller is not None:
        try:
            states = cluster.authoritative_partition_states(topic, controller)
            if states is not None:
                return states
        except Exception as exc:  # noqa: BLE001 - targeting a stale view beats not acting
            log.debug("controller view of %s unavailable, using any broker's: %s", topic, exc)
    return cluster.partition_states(topic)


def resolve_nodes(ctx: NemesisContext, value: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Turn an abstract target into node names.

    ``value`` keys: ``target`` ("random" | "leader" | "controller" | "minority"
    | "all" | "node" | a node name), ``node`` (a name), ``node_index`` (index
    into the sorted node names, modulo their count), ``partition`` (exact) or
    ``partition_index`` (modulo the partition count) for "leader", ``seed``. Returns (names, details) where details names the
    resolved partition/leader/controller for the completed op.
    """
    names = node_names(ctx.cluster)
    target = value.get("target")
    node = value.get("node")
    if target is None:
        target = "node" if node is not None or value.get("node_index") is not None else "random"
    if target not in TARGETS and target not in ROLE_TARGETS and target != "node":
        node, target = target, "node"
    details: dict[str, Any] = {"target": target}
    if target == "node":
        if node is None:
            if value.get("node_index") is None:
                raise UsageError("target 'node' needs a node name or node_index")
            node = names[int(value["node_index"]) % len(names)]
        node = ctx.cluster.node(str(node)).name  # UsageError for an unknown name
        return [node], details
    if target == "random":
        return [op_rng(ctx, value).choice(names)], details
    if target == "all":
        return names, details
    if target == "minority":
        k = (len(names) - 1) // 2
        picked = op_rng(ctx, value).sample(names, k) if k else []
        return sort_nodes(picked), details
    if target == "leader":
        p, leader = partition_leader(ctx, value)
        details.update(partition=p, leader=leader)
        return ([leader] if leader else []), details
    if target == "controller":
        cid = ctx.cluster.active_controller()
        controller = f"n{cid}" if cid is not None else None
        details["controller"] = controller
        return ([controller] if controller else []), details
    if target in ROLE_TARGETS:  # nemesis.roles: controllers, active-controller, brokers
        return resolve_role(ctx.cluster, target, value, op_rng(ctx, value))
    raise UsageError(f"unknown target {target!r}; choose {', '.join(TARGETS + ROLE_TARGETS)} or a node name")
