"""Rolling upgrades and feature-level changes as faults (docs/design.md, "Rolling upgrades").

An operator upgrades a KRaft cluster one node at a time: stop the broker,
put the new release's jars in place, start it with the same data folder and
server.properties, wait until it has caught up; once every node runs the new
release, bump the cluster's metadata.version with ``kafka-features``. Here
each step is a nemesis op and records what Kafka answered:

``upgrade-node`` (``node``, ``version``): unpack ``version``'s jars on the
  node beside its own (while the broker runs), then a controlled shutdown
  (SIGTERM, SIGKILL after SHUTDOWN_WAIT_S), then switch the node's Kafka to
  them. Starts an ``upgrade`` fault on the node: it is down from here.
  completed: ``version_before``, ``version`` (installed now), ``staged``,
  ``exit_s``, ``forced``.
``restart-upgraded`` (``node``): start the broker on the new jars, wait until
  it logged that it started and (a broker) is back in the ISR of every
  partition of the run's topic it replicates. Ends the fault. completed:
  ``running_version`` (the "Kafka version:" its log printed at this start),
  ``start_s``, ``in_isr`` and ``isr_wait_s`` (or ``not_in_isr``).
``finalize-upgrade`` (``version``): ``kafka-features upgrade --metadata X.Y``
  on a node running ``version``: the metadata.version bump alone, not
  ``--release-version``, which also moves kraft.version and so turns a
  static quorum dynamic (KAFKA-21426). completed: ``features_before``,
  ``answer`` (exit status and the tool's words), ``features_after``.
``set-feature`` (``feature``, ``level``): ``kafka-features upgrade`` or
  ``downgrade`` (``disable`` for level 0) of transaction.version,
  eligible.leader.replicas.version or group.version; completed as
  finalize-upgrade, with ``command``.
``end-upgrade``: start every broker an upgrade left down (``target`` "all":
  every broker not running).

The ``rolling-upgrade`` package plans one roll of every node (controllers
first) during the workload, then the finalize; the version comes from the
run's ``upgrade_to`` (``bind_upgrade``).
"""
from __future__ import annotations

import dataclasses
import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from broker.config import BROKER_PORT, broker_id
from broker.log_dump import node_kafka_version
from history.ops import ACTION_START, ACTION_STOP
from infra.distribution import KAFKA_LIB, resolve_kafka
from infra.kafka_versions import parse_version
from nemesis.operations import controlled_shutdown, tool_answer
from nemesis.process import restart_down
from nemesis.protocol import NemesisContext, Op, completed, current_states

log = logging.getLogger(__name__)

UPGRADE = "rolling-upgrade"         # the fault kind (the package's name, as planned-moves')
ROLLING_UPGRADE = UPGRADE
UPGRADE_NODE = "upgrade-node"
RESTART_UPGRADED = "restart-upgraded"
FINALIZE_UPGRADE = "finalize-upgrade"
SET_FEATURE = "set-feature"
END_UPGRADE = "end-upgrade"
SETTABLE_FEATURES = ("transaction.version", "eligible.leader.replicas.version", "group.version")

FEATURE_TOOL = "org.apache.kafka.tools.FeatureCommand"
TOOL_TIMEOUT_S = 60.0
SHUTDOWN_WAIT_S = 60.0
RESTART_TIMEOUT_S = 120.0    # the first start on new jars has no CDS archive: slower
ISR_WAIT_S = 90.0
_DESCRIBE_KEYS = {"SupportedMinVersion": "min", "SupportedMaxVersion": "max",
                  "FinalizedVersionLevel": "finalized", "Epoch": "epoch"}
_DESCRIBE_COLUMN = re.compile(r"\b(Feature|SupportedMinVersion|SupportedMaxVersion|FinalizedVersionLevel|Epoch):"
                              r"\s*(\S+)")
NODE_GAP_S = 5.0             # the plan's pause between one node's return and the next one's stop


# -- pure: what may be asked, and in which order ----------------------------------------
def upgrade_problem(current: str, target: str) -> str | None:
    """Why rolling ``current`` onto ``target`` is no upgrade (one line), or None."""
    try:
        cur, new = parse_version(current), parse_version(target)
    except ValueError as exc:
        return f"upgrade_to: {exc}"
    if new == cur:
        return f"upgrade_to {target} is the version the cluster starts with (kafka_version {current})"
    if new < cur:
        return (f"upgrade_to {target} is older than kafka_version {current}: a rolling downgrade "
                f"is not an upgrade kchaos plans")
    if cur < (3, 3, 0):
        return f"Kafka {target} upgrades KRaft clusters from 3.3 on; kafka_version {current} is older"
    return None


def metadata_release(version: str) -> str:
    """``"4.3.1"`` -> ``"4.3"``: the release kafka-features ``--metadata`` names."""
    major, minor, _ = parse_version(version)
    return f"{major}.{minor}"


def roll_order(brokers: int, controllers: int) -> list[str]:
    """Node names in the order a roll takes them: controller-only nodes first
    (numbered after the brokers), then the brokers (every node when combined)."""
    return [f"n{i}" for i in range(brokers + 1, brokers + controllers + 1)] + \
           [f"n{i}" for i in range(1, brokers + 1)]


def rolling_plan(version: str | None, brokers: int, controllers: int, interval_s: float,
                 rng: random.Random) -> list[tuple[float, Op]]:
    """One roll as (seconds after the workload starts, op): each node stopped,
    switched and restarted in turn, a short gap apart, then the finalize. The
    times are lower bounds: the runner starts a step its gap after the previous
    one completed (harness/fault_pacing.py), and each restart waits for the ISR."""
    t = round(rng.uniform(0.25, 0.5) * interval_s, 3)
    out: list[tuple[float, Op]] = []
    for name in roll_order(brokers, controllers):
        out.append((t, {"f": UPGRADE_NODE, "value": {"fault": UPGRADE, "node": name, "version": version}}))
        out.append((round(t + 0.1, 3), {"f": RESTART_UPGRADED, "value": {"fault": UPGRADE, "node": name}}))
        t = round(t + 0.1 + NODE_GAP_S, 3)
    out.append((t, {"f": FINALIZE_UPGRADE, "value": {"fault": UPGRADE, "version": version}}))
    return out


def parse_features(text: str) -> dict[str, dict[str, Any]]:
    """``kafka-features describe`` output as {feature: {"finalized", "min", "max", "epoch"}}
    (3.9 separates the columns with tabs, 4.3 pads them with spaces)."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        cols = dict(_DESCRIBE_COLUMN.findall(line))
        name = cols.pop("Feature", "")
        if name:
            out[name] = {_DESCRIBE_KEYS[k]: _level(v) for k, v in cols.items()}
    return out


def _level(text: str) -> Any:
    return int(text) if text.lstrip("-").isdigit() else text


def feature_command(feature: str, level: int, finalized: int | None) -> list[str]:
    """The kafka-features arguments that set ``feature`` to ``level`` from
    ``finalized`` (None: unknown, asked as an upgrade)."""
    if feature not in SETTABLE_FEATURES:
        raise ValueError(f"set-feature sets {', '.join(SETTABLE_FEATURES)}, not {feature!r}")
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ValueError(f"set-feature: level must be a whole number, 0 or more, got {level!r}")
    if level == 0:
        return ["disable", "--feature", feature]
    verb = "downgrade" if finalized is not None and level < finalized else "upgrade"
    return [verb, "--feature", f"{feature}={level}"]


def bind_upgrade(package: Any, version: str | None, brokers: int, controllers: int) -> Any:
    """The rolling-upgrade package with the run's target version and node
    counts (unchanged: any other package, or no version)."""
    if not isinstance(package, RollingUpgradePackage) or not version:
        return package
    return dataclasses.replace(package, version=version, brokers=brokers, controllers=controllers)


# -- side effects --------------------------------------------------------------------
class UpgradeNemesis:
    """The ops above; ``end-upgrade`` (and teardown) start what an upgrade left down."""

    fs = frozenset({UPGRADE_NODE, RESTART_UPGRADED, FINALIZE_UPGRADE, SET_FEATURE, END_UPGRADE})

    def __init__(self) -> None:
        self.ctx: NemesisContext | None = None
        self.down: set[str] = set()

    def setup(self, ctx: NemesisContext) -> None:
        self.ctx = ctx

    def invoke(self, op: Op) -> Op:
        assert self.ctx is not None, "setup() first"
        value = dict(op.get("value") or {})
        f = op["f"]
        if f == UPGRADE_NODE:
            return completed(op, self._upgrade(value), action=ACTION_START)
        if f == RESTART_UPGRADED:
            return completed(op, self._restart(value), action=ACTION_STOP)
        if f == FINALIZE_UPGRADE:
            release = metadata_release(_required(value, "version"))
            return completed(op, self._features(lambda levels: ["upgrade", "--metadata", release],
                                                value["version"]), action=None)
        if f == SET_FEATURE:
            feature, level = _required(value, "feature"), value.get("level")

            def command(levels: dict[str, Any]) -> list[str]:
                finalized = (levels.get(feature) or {}).get("finalized")
                return feature_command(feature, level, finalized if isinstance(finalized, int) else None)
            return completed(op, {"feature": feature, "level": level, **self._features(command)}, action=None)
        if f == END_UPGRADE:
            out, errors = restart_down(self.ctx.cluster, self.down, value, UPGRADE, RESTART_TIMEOUT_S)
            return completed(op, out, errors, action=ACTION_STOP)
        raise ValueError(f"UpgradeNemesis cannot do {f!r}")

    def _upgrade(self, value: dict[str, Any]) -> dict[str, Any]:
        name = self.ctx.cluster.node(_required(value, "node")).name
        version = _required(value, "version")
        broker = self.ctx.cluster.brokers[name]
        before = node_kafka_version(broker.node)
        out: dict[str, Any] = {"fault": UPGRADE, "nodes": [name], "version_before": before}
        if parse_version(before) >= parse_version(version):
            return {**out, "nodes": [], "version": before, "skipped": f"{name} runs {before} already"}
        began = time.monotonic()
        out["staged"] = broker.stage_kafka(resolve_kafka(version))
        out["stage_s"] = round(time.monotonic() - began, 3)
        self.down.add(name)
        out.update(controlled_shutdown(broker, SHUTDOWN_WAIT_S))
        broker.switch_kafka(before, version)
        out["version"] = node_kafka_version(broker.node)
        return out

    def _restart(self, value: dict[str, Any]) -> dict[str, Any]:
        name = self.ctx.cluster.node(_required(value, "node")).name
        began = time.monotonic()
        self.ctx.cluster.restart(name, RESTART_TIMEOUT_S)
        self.down.discard(name)
        out: dict[str, Any] = {"fault": UPGRADE, "nodes": [name], "start_s": round(time.monotonic() - began, 3),
                               "running_version": self.ctx.cluster.brokers[name].logged_version()}
        if self.ctx.cluster.role_of(name) != "controller" and self.ctx.topic:
            out.update(self._wait_in_isr(name))
        return out

    def _wait_in_isr(self, name: str) -> dict[str, Any]:
        """Until the node is in the ISR of every partition of the run's topic it replicates."""
        bid, began = broker_id(name), time.monotonic()
        missing: list[int] = []
        while time.monotonic() - began < ISR_WAIT_S:
            try:
                states = current_states(self.ctx.cluster, str(self.ctx.topic))
                missing = [s.partition for s in states if bid in s.replicas and bid not in s.isr]
                if not missing:
                    return {"in_isr": True, "isr_wait_s": round(time.monotonic() - began, 3)}
            except Exception as exc:  # noqa: BLE001 - brokers answer late while one rejoins; ask again
                log.debug("ISR of %s: %s", self.ctx.topic, exc)
            time.sleep(0.5)
        return {"in_isr": False, "not_in_isr": missing}

    def _tool_node(self, version: str | None = None):
        """A running broker node to run kafka-features on: one whose Kafka is
        ``version`` when given (an older tool may not know the newer release's
        name), else the newest installed."""
        running = [n for n in self.ctx.cluster.broker_nodes if self.ctx.cluster.brokers[n.name].is_running()]
        if not running:
            raise RuntimeError("no broker is running to run kafka-features on")
        installed = {n.name: node_kafka_version(n) for n in running}
        if version is not None:
            matching = [n for n in running if installed[n.name] == version]
            if not matching:
                raise RuntimeError(f"no running broker has Kafka {version} installed "
                                   f"({', '.join(f'{k}: {v}' for k, v in sorted(installed.items()))})")
            return matching[0], version
        node = max(running, key=lambda n: parse_version(installed[n.name]))
        return node, installed[node.name]

    def _run_tool(self, node, args: Sequence[str]):
        return node.run(["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                         "-Dlog4j2.level=OFF", "-cp", f"{KAFKA_LIB}/*", FEATURE_TOOL,
                         "--bootstrap-server", f"{node.address}:{BROKER_PORT}", *args],
                        check=False, timeout=TOOL_TIMEOUT_S)

    def _describe(self, node) -> dict[str, Any]:
        """{feature: levels} as kafka-features describe says, or {"error": ...}."""
        res = self._run_tool(node, ["describe"])
        if res.exit != 0:
            return {"error": f"exit {res.exit}: {tool_answer(res.out + chr(10) + res.err)}"}
        return parse_features(res.out)

    def _features(self, command: Callable[[dict[str, Any]], list[str]],
                  version: str | None = None) -> dict[str, Any]:
        """Kafka's feature levels, ``command(levels)``'s answer, the levels after."""
        node, tool_version = self._tool_node(version)
        before = self._describe(node)
        args = command(before)
        res = self._run_tool(node, args)
        return {"fault": UPGRADE, "nodes": [], "tool_node": node.name, "tool_version": tool_version,
                "command": " ".join(args), "features_before": before,
                "answer": f"exit {res.exit}: {tool_answer(res.out + chr(10) + res.err)}",
                "accepted": res.exit == 0, "features_after": self._describe(node)}

    def teardown(self) -> None:
        if self.ctx is not None and self.down:
            restart_down(self.ctx.cluster, self.down, {}, UPGRADE, RESTART_TIMEOUT_S)


def _required(value: dict[str, Any], key: str) -> Any:
    if value.get(key) in (None, ""):
        raise ValueError(f"this op needs {key!r} in its value")
    return value[key]


@dataclass(frozen=True)
class RollingUpgradePackage:
    """One roll of every node onto ``version`` during the workload, then the
    finalize; its final op starts whatever an upgrade left down."""

    name: str = ROLLING_UPGRADE
    color: str = "#364fc7"
    version: str | None = None
    brokers: int = 3
    controllers: int = 0
    final: tuple[Op, ...] = ({"f": END_UPGRADE, "value": {"fault": UPGRADE, "target": "all"}},)

    def make_nemesis(self) -> UpgradeNemesis:
        return UpgradeNemesis()

    def plan(self, time_limit_s: float, interval_s: float, rng: random.Random) -> list[tuple[float, Op]]:
        return rolling_plan(self.version, self.brokers, self.controllers, interval_s, rng)

    def final_ops(self) -> list[Op]:
        return [{"f": op["f"], "value": dict(op["value"])} for op in self.final]
