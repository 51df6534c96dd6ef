"""Power loss: the broker dies and its disk keeps only what was fsynced.

``power-loss`` SIGKILLs the broker on each target, then drops from its partition
logs every byte Kafka never fsynced (``broker.unsynced_data``: a cut per log, from the
recovery-point checkpoint, the active segment and the topic's flush settings),
and leaves it down; ``power-on`` starts it again (Kafka recovers the cut logs as
after any unclean shutdown). A SIGKILL alone keeps the page cache: this is the
fault that shows what acks=all means without fsync (docs/design.md, "Faults").

Targets: those of ``nemesis.protocol.resolve_nodes``, plus ``majority`` (a seeded
random majority) and ``nodes`` (an explicit list). The completion records per
node what was lost (``took``: a line per node; ``logs``: per partition log the
dropped offsets [from, to), records and bytes).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from broker.cluster import KafkaCluster
from broker.config import CONFIG_PATH
from broker.unsynced_data import LONG_MAX, FlushPolicy, power_cut, preflight_script
from history.ops import ACTION_START, ACTION_STOP
from infra.errors import UsageError

from nemesis.protocol import NemesisContext, Op, completed, each, node_names, op_rng, resolve_nodes
from nemesis.process import ensure_running, restart_down
from nemesis.topology import sort_nodes

log = logging.getLogger(__name__)

POWER_LOSS, POWER_ON = "power-loss", "power-on"
FAULT = "power-loss"
POWER_TARGETS = ("random", "leader", "controller", "minority", "majority", "all")


def resolve_power_targets(ctx: NemesisContext, value: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Node names for a power-loss op: ``nodes`` (a list), target ``majority``,
    or any target ``resolve_nodes`` knows. Unknown names raise UsageError."""
    if value.get("nodes"):
        names = [ctx.cluster.node(str(n)).name for n in value["nodes"]]  # UsageError for an unknown name
        return sort_nodes(set(names)), {"target": "nodes"}
    if value.get("target") == "majority":
        names = node_names(ctx.cluster)
        return sort_nodes(op_rng(ctx, value).sample(names, len(names) // 2 + 1)), {"target": "majority"}
    return resolve_nodes(ctx, value)


def preflight(cluster: KafkaCluster, names: list[str]) -> None:
    """Raise UsageError naming the nodes that cannot lose power the kchaos way
    (no log dir where kchaos puts it, or no find/truncate), before any is hit."""
    results, errors = each(lambda n: cluster.node(n).run(["sh", "-c", preflight_script()], check=False).exit == 0,
                           names)
    bad = sorted([n for n, ok in results.items() if not ok] + list(errors))
    if bad:
        raise UsageError(f"power-loss cannot run on {', '.join(bad)}: it needs the broker's log dir at its "
                         "kchaos place and find/truncate on the node")


def _long(text: Any) -> int:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return LONG_MAX


def topic_flush_policies(cluster: KafkaCluster, timeout_s: float = 10.0) -> dict[str, FlushPolicy]:
    """Every topic's effective ``flush.messages`` and ``flush.ms``, from the brokers."""
    # here, as in broker.cluster: `kchaos --help` imports this module, and confluent_kafka need not load for it
    from confluent_kafka.admin import ConfigResource, ResourceType
    admin = cluster.admin(timeout_s)
    topics = list(admin.list_topics(timeout=timeout_s).topics)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                     request_timeout=timeout_s)
    out: dict[str, FlushPolicy] = {}
    for res, fut in futures.items():
        entries = fut.result(timeout=timeout_s)
        out[res.name] = FlushPolicy(_long(getattr(entries.get("flush.messages"), "value", None)),
                                    _long(getattr(entries.get("flush.ms"), "value", None)))
    return out


def broker_flush_policy(cluster: KafkaCluster, name: str) -> FlushPolicy:
    """The broker-wide default from the node's server.properties (topics without overrides)."""
    text = cluster.node(name).run(["cat", CONFIG_PATH], check=False).out
    props = dict(l.split("=", 1) for l in text.splitlines() if "=" in l and not l.startswith("#"))
    return FlushPolicy(_long(props.get("log.flush.interval.messages", LONG_MAX)),
                       _long(props.get("log.flush.interval.ms", props.get("log.flush.scheduler.interval.ms", LONG_MAX))))


def summary(cut: dict[str, Any]) -> str:
    """One short line of what a node lost, e.g. "17 records: kchaos-0 [163,180)"
    (short: the report shows the start of a nemesis value only)."""
    logs = cut.get("logs") or {}
    if not logs:
        return "nothing (everything was fsynced)"
    parts = [f"{d} [{r['from']},{r['to']})" for d, r in sorted(logs.items()) if r.get("records")]
    return f"{cut.get('records', 0)} records" + (": " + " ".join(parts) if parts else f", {cut.get('bytes', 0)} bytes")


class PowerLossNemesis:
    """``power-loss``: SIGKILL, then cut every unfsynced log byte, on the targets;
    with ``restart`` in the value, start them again at once, else leave them
    down. ``power-on``: start the brokers this nemesis powered off; with
    ``target`` "all", every broker that is not running."""

    fs = frozenset({POWER_LOSS, POWER_ON})

    def __init__(self, ctx: NemesisContext | None = None, restart_timeout_s: float = 120.0) -> None:
        self.ctx = ctx
        self.off: set[str] = set()
        self.restart_timeout_s = restart_timeout_s
        self._policies: dict[str, FlushPolicy] | None = None

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def _policy_source(self) -> tuple[Callable[[str, str], FlushPolicy], str]:
        """(node, topic) -> flush policy: the topics' own configs (asked before
        the brokers die, kept for the run: they do not change), else the broker default."""
        note = "topic configs"
        try:
            self._policies = topic_flush_policies(self.ctx.cluster)
        except Exception as exc:  # noqa: BLE001 - brokers may be down already
            note = (f"topic configs of an earlier ask ({type(exc).__name__}: {exc})" if self._policies
                    else f"server.properties ({type(exc).__name__}: {exc})")
        known = dict(self._policies or {})
        defaults: dict[str, FlushPolicy] = {}

        def policy(node: str, topic: str) -> FlushPolicy:
            if topic in known:
                return known[topic]
            if node not in defaults:
                defaults[node] = broker_flush_policy(self.ctx.cluster, node)
            return defaults[node]
        return policy, note

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        if op["f"] == POWER_LOSS:
            return self._lose(op, value)
        if op["f"] == POWER_ON:
            return self._on(op, value)
        raise ValueError(f"PowerLossNemesis cannot do {op['f']!r}")

    def _lose(self, op: Op, value: dict[str, Any]) -> Op:
        cluster = self.ctx.cluster
        nodes, details = resolve_power_targets(self.ctx, value)
        preflight(cluster, nodes)
        policy, source = self._policy_source()

        def lose(name: str) -> dict[str, Any]:
            broker = cluster.brokers[name]
            was_running = broker.kill()
            if broker.is_running():
                raise RuntimeError("the broker survived SIGKILL; its logs were not cut")
            self.off.add(name)
            return {**power_cut(cluster.node(name), lambda topic: policy(name, topic)), "was_running": was_running}

        results, errors = each(lose, nodes)
        # What was lost first: the report shows the start of the value.
        out: dict[str, Any] = {"fault": FAULT, "nodes": sort_nodes(results),
                               "took": {n: summary(results[n]) for n in sort_nodes(results)},
                               "records_lost": sum(r["records"] for r in results.values()), **details}
        for key in ("seed", "node_index", "partition_index"):
            if value.get(key) is not None:
                out[key] = value[key]
        out["logs"] = {n: results[n]["logs"] for n in sort_nodes(results)}
        down = sort_nodes(n for n, r in results.items() if not r["was_running"])
        if down:
            out["were_down"] = down
        out["flush_settings"] = source
        inexact = sorted({d for r in results.values() for d, rec in r["logs"].items() if rec.get("exact") is False})
        if inexact:
            out["inexact"] = inexact  # flush settings Kafka applies at times no file records
        out["metadata_log"] = "kept: KRaft voters fsync every append"
        if value.get("restart"):
            started, rerrors = each(lambda n: ensure_running(cluster, n, self.restart_timeout_s), sort_nodes(results))
            self.off -= set(started)
            out["restarted"] = sort_nodes(started)
            errors = {**errors, **{n: f"restart: {e}" for n, e in rerrors.items()}}
        return completed(op, out, errors, action=ACTION_START)

    def _on(self, op: Op, value: dict[str, Any]) -> Op:
        out, errors = restart_down(self.ctx.cluster, self.off, value, FAULT, self.restart_timeout_s)
        return completed(op, out, errors, action=ACTION_STOP)

    def teardown(self) -> None:
        if self.ctx is not None:
            self._on({"f": POWER_ON}, {"target": "all"})
