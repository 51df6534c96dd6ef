"""Quorum membership as a fault (KIP-853): controllers removed from a dynamic
KRaft quorum and put back, as an operator does (docs/design.md, "Quorum membership").

Kafka's own history here: KAFKA-17608 (a controller crashed when the active
controller was removed from the quorum). Every completion records what
``kafka-metadata-quorum`` answered, and the voter set before and after.

Ops (package ``quorum-changes``; needs ``quorum = "dynamic"`` and controllers
on nodes of their own):

``remove-controller``: invoke ``target`` "active-controller" (the quorum
  leader) or "controllers" (the voter ``node_index`` picks, modulo the voter
  count, in id order), optional ``decommission`` (after the removal, stop the
  controller, delete its data and format it again with
  ``--no-initial-controllers``, as a replacement disk would be: it comes back
  with a new directory id). completed: ``nodes``, ``controller``,
  ``directory_id``, ``was_leader``, ``voters_before``, ``voters_after``,
  ``leader_after``, ``answer`` (the tool's), ``decommissioned``.
``add-controller``: put back the controllers this nemesis removed (``target``
  "all": every controller node that is not a voter, the final heal): start it
  if it is down, then ``add-controller`` with its own config, asked again
  until the leader accepts it (a new voter must first catch up as an
  observer). completed: ``nodes``, ``answers`` {node: [tool answers]},
  ``voters_after``.

Nothing here is a branch of the runner: the package plugs into
nemesis.packages like the others.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from broker.config import DATA_DIR, broker_id
from broker.cluster import KafkaCluster
from broker.quorum_tool import NO_INITIAL_CONTROLLERS, ToolAnswer, add_controller, controller_bootstrap, \
    describe, directory_id, parse_meta_properties, parse_status, remove_controller, META_PROPERTIES
from history.ops import ACTION_START, ACTION_STOP
from infra.errors import UsageError
from infra.kafka_versions import has

from nemesis.protocol import NemesisContext, Op, completed
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

QUORUM_CHANGES = "quorum-changes"
REMOVE_CONTROLLER = "remove-controller"
ADD_CONTROLLER = "add-controller"
ACTIVE_CONTROLLER, CONTROLLERS = "active-controller", "controllers"
ADD_WAIT_S = 60.0       # how long add-controller is asked again while the new voter catches up
SETTLE_WAIT_S = 15.0    # how long a completion waits for the voter set to show the change


# -- pure: validation and choices -------------------------------------------------
def check_quorum(quorum: str, kafka_version: str, controllers: int, faults: Sequence[str]) -> None:
    """UsageError (one line, exit 64 before any cluster starts) for an unknown
    quorum, a dynamic one on a Kafka without KIP-853, or quorum changes on a
    cluster that cannot have them."""
    if quorum not in ("static", "dynamic"):
        raise UsageError(f"unknown quorum {quorum!r}; valid: static, dynamic")
    if quorum == "dynamic" and not has(kafka_version, "dynamic-quorum"):
        raise UsageError(f'quorum = "dynamic" needs KIP-853 (Kafka 3.9 and later); Kafka {kafka_version} has none')
    if QUORUM_CHANGES not in {name.strip().lower() for entry in faults for name in str(entry).split(",")}:
        return
    if quorum != "dynamic":
        raise UsageError(f'{QUORUM_CHANGES} adds and removes controllers, which a static quorum cannot: '
                         'set quorum = "dynamic"')
    if controllers < 2:
        raise UsageError(f"{QUORUM_CHANGES} needs separate controllers, at least 2 (set controllers = 3)")


def voter_ids(status: dict[str, Any]) -> list[int]:
    return sorted(int(v["id"]) for v in status.get("voters") or [])


def pick_voter(status: dict[str, Any], target: str, node_index: int) -> int | None:
    """The voter id an op removes: the leader, or the ``node_index``-th voter in id order."""
    if target == ACTIVE_CONTROLLER:
        return status.get("leader_id")
    if target != CONTROLLERS:
        raise UsageError(f"remove-controller targets {ACTIVE_CONTROLLER!r} or {CONTROLLERS!r}, got {target!r}")
    ids = voter_ids(status)
    return ids[node_index % len(ids)] if ids else None


def voter_directory(status: dict[str, Any], controller_id: int) -> str | None:
    return next((v.get("directoryId") for v in status.get("voters") or [] if int(v["id"]) == controller_id), None)


# -- side effects -------------------------------------------------------------------
def quorum_status(cluster: KafkaCluster) -> tuple[dict[str, Any], ToolAnswer | None]:
    """``describe --status`` asked on the first running controller that answers."""
    boot = controller_bootstrap([n.address for n in cluster.controller_nodes])
    answer = None
    for node in cluster.controller_nodes:
        if not cluster.brokers[node.name].is_running():
            continue
        answer = describe(node, boot)
        if answer.ok:
            return parse_status(answer.text), answer
    return {}, answer


class QuorumNemesis:
    """remove-controller / add-controller on a dynamic quorum; ``add-controller``
    ends what ``remove-controller`` began."""

    fs = frozenset({REMOVE_CONTROLLER, ADD_CONTROLLER})

    def __init__(self, ctx: NemesisContext | None = None, restart_timeout_s: float = 90.0) -> None:
        self.ctx = ctx
        self.restart_timeout_s = restart_timeout_s
        self.removed: set[str] = set()

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    @property
    def _boot(self) -> str:
        return controller_bootstrap([n.address for n in self.ctx.cluster.controller_nodes])

    def _tool_node(self, avoid: str | None = None):
        """A running controller to run the tool on (not ``avoid`` when another runs)."""
        running = [n for n in self.ctx.cluster.controller_nodes if self.ctx.cluster.brokers[n.name].is_running()]
        if not running:
            raise RuntimeError("no controller is running to run kafka-metadata-quorum on")
        return next((n for n in running if n.name != avoid), running[0])

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        if op["f"] == REMOVE_CONTROLLER:
            out, errors = self._remove(value)
            return completed(op, out, errors, action=ACTION_START)
        if op["f"] == ADD_CONTROLLER:
            out, errors = self._add(value)
            return completed(op, out, errors, action=ACTION_STOP)
        raise ValueError(f"QuorumNemesis cannot do {op['f']!r}")

    def _settled(self, check) -> dict[str, Any]:
        """The quorum status once ``check(status)`` holds, or the last one seen after SETTLE_WAIT_S."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        while True:
            status, _ = quorum_status(self.ctx.cluster)
            if (status and check(status)) or time.monotonic() >= deadline:
                return status
            time.sleep(0.5)

    def _remove(self, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        target = str(value.get("target") or CONTROLLERS)
        out: dict[str, Any] = {"fault": QUORUM_CHANGES, "target": target, "nodes": []}
        status, answer = quorum_status(self.ctx.cluster)
        if not status:
            return out, {"quorum": f"describe --status failed: {answer.summary() if answer else 'no controller runs'}"}
        out["voters_before"] = voter_ids(status)
        cid = pick_voter(status, target, int(value.get("node_index") or 0))
        if cid is None or len(out["voters_before"]) < 2:
            out["skipped"] = "no voter to remove (one voter left, or no leader)"
            return out, {}
        name, dir_id = f"n{cid}", voter_directory(status, cid)
        out.update(nodes=[name], controller=name, directory_id=dir_id, was_leader=cid == status.get("leader_id"))
        res = remove_controller(self._tool_node(), self._boot, cid, str(dir_id))
        out["answer"] = res.summary()
        self.removed.add(name)
        after = self._settled(lambda s: cid not in voter_ids(s))
        out.update(voters_after=voter_ids(after), leader_after=after.get("leader_id"))
        errors = {} if res.ok else {name: out["answer"]}
        if value.get("decommission") and res.ok:
            out["decommissioned"] = self._decommission(name)
        return out, errors

    def _decommission(self, name: str) -> str:
        """Stop the removed controller and format its disk anew as a non-voter
        (a new directory id); it stays down until add-controller."""
        cluster = self.ctx.cluster
        peer = next(n for n in cluster.controller_nodes if n.name != name)
        cluster_id = parse_meta_properties(peer.run(["cat", META_PROPERTIES], check=False).out).get("cluster.id")
        broker = cluster.brokers[name]
        broker.stop()
        broker.node.run(["sh", "-c", f"rm -rf {DATA_DIR}/*"])
        broker.format(str(cluster_id), [NO_INITIAL_CONTROLLERS])
        return f"formatted with {NO_INITIAL_CONTROLLERS}, directory id {directory_id(broker.node)}"

    def _add(self, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        cluster = self.ctx.cluster
        wanted = set(self.removed)
        status, _ = quorum_status(cluster)
        if value.get("target") == "all":
            voters = voter_ids(status)
            wanted |= {n.name for n in cluster.controller_nodes if status and broker_id(n.name) not in voters}
        out: dict[str, Any] = {"fault": QUORUM_CHANGES, "nodes": sort_nodes(wanted), "answers": {}}
        if value.get("target"):
            out["target"] = value["target"]
        errors: dict[str, str] = {}
        for name in sort_nodes(wanted):
            try:
                answers, added = self._add_one(name)
                out["answers"][name] = [a.summary() for a in answers]
                if added:
                    self.removed.discard(name)
                else:
                    errors[name] = answers[-1].summary() if answers else "not added"
            except Exception as exc:  # noqa: BLE001 - reported per controller, the others still added
                errors[name] = f"{type(exc).__name__}: {exc}"
        ids = {broker_id(n) for n in wanted}
        after = self._settled(lambda s: ids <= set(voter_ids(s)))
        out.update(voters_after=voter_ids(after), leader_after=after.get("leader_id"))
        return out, errors

    def _add_one(self, name: str) -> tuple[list[ToolAnswer], bool]:
        """Start ``name`` if it is down, then add-controller until Kafka accepts (or
        ADD_WAIT_S passes): a voter must be known to the leader as a caught-up
        observer. The tool's last answers, and whether ``name`` is a voter now."""
        cluster = self.ctx.cluster
        if not cluster.brokers[name].is_running():
            cluster.restart(name, self.restart_timeout_s)
        node = cluster.node(name)
        answers: list[ToolAnswer] = []
        deadline = time.monotonic() + ADD_WAIT_S
        while True:
            status, _ = quorum_status(cluster)
            if status and broker_id(name) in voter_ids(status):
                return answers[-5:], True  # a voter (an earlier attempt may have gone through after its timeout)
            answers.append(add_controller(node, self._boot))
            if answers[-1].ok:
                return answers[-5:], True
            if time.monotonic() >= deadline:
                return answers[-5:], False
            time.sleep(2.0)

    def teardown(self) -> None:
        if self.ctx is not None and self.removed:
            self._add({"target": "all"})
