"""The ``proxy`` fault package: a run's protocol proxy armed with its rules,
then healed (docs/design.md, "Faults inside Kafka's protocol").

A run with ``[[nemesis.proxy]]`` rules is a proxied run: ``RunProxy`` binds
one port per broker before the cluster starts (the brokers advertise them,
broker.config), starts forwarding once the nodes have addresses (in a
process of its own, nemesis.proxy_process), and stops with the cluster. The
package's plan arms the rules once, early in the workload (``proxy-arm``, a
fault start); its final op heals (``proxy-heal``: everything passes through,
requests still held are dropped unsent). In between, each thing a rule does is a nemesis event of its own
(nemesis.kafka_proxy, ``proxy_event_op``). The fault budget holds what the
rules impair for the whole plan (``ProxyPackage.standing_cost``), so the random
faults mixed with them keep to it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from broker.cluster import KafkaCluster
from broker.config import PROXY_PORT
from nemesis.budget import Budget, Cost
from nemesis.kafka_proxy import FAULT, proxy_event_op
from nemesis.proxy_process import ProxyProcess
from nemesis.proxy_rules import Rule, brokers_impaired, parse_rules
from nemesis.protocol import NemesisContext, Op, completed, node_names

ARM = "proxy-arm"
HEAL = "proxy-heal"
ARM_AT_S = 1.0  # seconds into the workload: the clients have their connections by then

# The proxy of each running cluster, so that the package's nemesis (built
# from the cluster alone, like every nemesis) finds it.
_ATTACHED: dict[int, tuple[ProxyProcess, list[Rule]]] = {}


class RunProxy:
    """The proxy of one run, from before the cluster starts to its teardown."""

    def __init__(self, raw_rules: Any, node_count: int, seed: int,
                 record: Callable[[dict[str, Any]], Any]):
        self.rules = parse_rules(raw_rules)
        self.proxy = ProxyProcess([f"n{i}" for i in range(1, node_count + 1)],
                                  lambda value: record(proxy_event_op(value)), seed)
        self.cluster: KafkaCluster | None = None

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.proxy.ports)

    def bootstrap(self) -> str:
        return self.proxy.bootstrap()

    def start(self, cluster: KafkaCluster) -> None:
        self.proxy.start({n.name: (n.address, PROXY_PORT) for n in cluster.broker_nodes})  # clients reach brokers only
        self.cluster = cluster
        _ATTACHED[id(cluster)] = (self.proxy, self.rules)

    def stop(self) -> None:
        if self.cluster is not None:
            _ATTACHED.pop(id(self.cluster), None)
        self.proxy.stop()


class ProxyNemesis:
    fs = frozenset({ARM, HEAL})

    def __init__(self) -> None:
        self.proxy: ProxyProcess | None = None
        self.rules: list[Rule] = []
        self.nodes: list[str] = []

    def setup(self, ctx: NemesisContext) -> None:
        attached = _ATTACHED.get(id(ctx.cluster))
        if attached is None:
            raise RuntimeError("the proxy package needs a proxied run ([[nemesis.proxy]] rules)")
        self.proxy, self.rules = attached
        self.nodes = node_names(ctx.cluster)
        self.proxy.heal()

    def invoke(self, op: Op) -> Op:
        assert self.proxy is not None, "setup first"
        if op["f"] == ARM:
            self.proxy.arm(self.rules)
            rules = [r.describe() for r in self.rules]
            return completed(op, {"fault": FAULT, "nodes": self.nodes, "rules": rules}, action="start")
        dropped = self.proxy.heal()
        return completed(op, {"fault": FAULT, "nodes": self.nodes, "held_dropped": dropped}, action="heal")

    def teardown(self) -> None:
        if self.proxy is not None:
            self.proxy.heal()


@dataclass(frozen=True)
class ProxyPackage:
    """Armed once for the whole workload, healed in the final phase: the
    rules' own triggers say when they act, not the nemesis interval."""

    name: str = FAULT
    color: str = "#0c8599"
    final: tuple[Op, ...] = ({"f": HEAL, "value": {"fault": FAULT}},)

    def make_nemesis(self) -> ProxyNemesis:
        return ProxyNemesis()

    def plan(self, time_limit_s: float, interval_s: float, rng: random.Random) -> list[tuple[float, Op]]:
        return [(min(ARM_AT_S, time_limit_s / 2), {"f": ARM, "value": {"fault": FAULT}})]

    def final_ops(self) -> list[Op]:
        return [{"f": op["f"], "value": dict(op["value"])} for op in self.final]

    def standing_cost(self, settings: Any, budget: Budget) -> Cost:
        """What the armed rules (``settings.proxy``, the run's ``[[nemesis.proxy]]``)
        impair, held by the budget for the whole plan (nemesis.budget.Standing):
        the brokers whose client traffic they may act on. The proxy fronts
        brokers only, so it costs no controller-only node."""
        return brokers_impaired(parse_rules(settings.proxy), budget.n), 0
