"""RunConfig: everything that decides a run, as plain data.

Read from TOML (or a stored config.json), overridden by CLI flags, validated
up front so that a mistake costs one line and exit 64 rather than a broken
run. The stored config.json plus its seed reproduces the run's schedule.
"""
from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.settings_check import check_features, check_settings
from harness.client_config import validate_client_settings
from infra.distribution import DEFAULT_KAFKA_VERSION, check_available, validate_version
from infra.errors import UsageError
from infra.inventory import load_inventory
from infra.kafka_versions import features
from infra.tomlfile import load_toml
from harness.layout_config import validate_layout
from harness.workload_checks import validate_client, validate_group, validate_share, validate_transactions
from harness.nemesis_config import validate_planned_moves, validate_proxy, validate_steps
from nemesis.packages import build_packages, nemeses_of
from nemesis.upgrade import ROLLING_UPGRADE, UPGRADE_NODE, upgrade_problem
from nemesis.quorum import check_quorum
from workloads.kinds import WorkloadKind, kind_of, workload_names

MODES = ("assign", "subscribe", "share")
# "batch": one producer per process, each send op a batch flushed before it completes;
# "pipelined": up to in_flight one-message sends outstanding per producer (workloads/pipelined.py).
PRODUCERS = ("batch", "pipelined")
MAX_IN_FLIGHT = 1000
BACKENDS = ("docker", "ssh")
MAX_NODES = 7


@dataclass
class WorkloadConfig:
    name: str = "queue"
    partitions: int = 3
    replication_factor: int = 3
    mode: str = "assign"
    send_fraction: float = 0.7
    max_batch: int = 3
    op_timeout: float = 10.0
    poll_max_messages: int = 200
    poll_timeout: float = 0.02
    producer: str = "batch"
    in_flight: int = 5              # pipelined: messages outstanding per producer (one process each)
    # Transactions (workloads/txn.py): every op after the assign is a txn of
    # 1..txn_max_ops micro-ops, aborted by choice with abort_probability.
    transactions: bool = False
    txn_max_ops: int = 4
    abort_probability: float = 0.1
    txn_send_offsets: bool = False  # consume-transform-produce: send_offsets_to_transaction per txn
    crash_interval: float = 0.0     # seconds between client crashes per worker (0: none)
    # Consumer groups (mode = "subscribe", workloads/group.py): the share of all
    # ops that are commits (None: 0.1 in subscribe mode, 0 in assign mode), the
    # chance a commit is asynchronous, and the group id (None: "kchaos-<seed>").
    commit_fraction: float | None = None
    async_commit_probability: float = 0.5
    group_id: str | None = None
    # A migration between rebalance protocols (workloads/group.py): each worker's processes take these in
    # turn, e.g. ["classic", "consumer"]; empty: every member runs consumer."group.protocol" (classic unset).
    group_protocols: list[str] = field(default_factory=list)
    # kchaos replay (harness/replay.py): a history.jsonl whose recorded client ops the workers
    # invoke, at their recorded gaps, instead of the seed's.
    replay: str | None = None
    # Share groups (mode = "share", workloads/share.py and share_plan.py): the acknowledgement
    # mode, the group's record lock, delivery-attempt limit and session timeout, the chance a mark releases or
    # rejects, and the chance a member holds what it polled past its lock.
    share_ack_mode: str = "explicit"
    share_lock_ms: int = 15000
    share_delivery_limit: int = 5
    share_session_timeout_ms: int = 45000
    share_release_probability: float = 0.1
    share_reject_probability: float = 0.02
    share_hold_probability: float = 0.01
    client: str = "librdkafka"      # "librdkafka" (in-process) | "java" (kafka-clients, a driver JVM) | "external"
    client_version: str = ""        # java: the kafka-clients version; "" is the cluster's kafka_version
    # client = "external": the command line of an outside driver that speaks the client protocol
    # (docs/design.md, "The client protocol"), e.g. ["/opt/mydriver/bin/driver", "--flag"].
    driver_command: list[str] = field(default_factory=list)


@dataclass
class NemesisConfig:
    faults: list[str] = field(default_factory=list)
    interval: float = 15.0
    # The fault budget (nemesis/budget.py): nodes the random mix may impair at
    # once; None: as many as leave a controller quorum and min.insync.replicas.
    budget: int | None = None
    recovery_window: float = 10.0   # seconds after a fault stops before the next costly one starts
    # Scenario packages take their own knobs; unknown keys are theirs to validate.
    options: dict[str, Any] = field(default_factory=dict)
    # An explicit fault plan, {at, f, value} per step (at: seconds after the workload starts;
    # optional unit: steps kchaos shrink keeps or drops together), replacing the one drawn from
    # the seed; the packages of ``faults`` carry it out. Written by ``kchaos shrink`` (harness/shrink.py).
    steps: list[dict[str, Any]] = field(default_factory=list)
    # The protocol proxy's rules, [[nemesis.proxy]] tables (nemesis/proxy_rules.py);
    # the "proxy" fault arms them.
    proxy: list[dict[str, Any]] = field(default_factory=list)
    # Role targets (nemesis/roles.py) the packages' faults aim at; empty: their usual mix.
    targets: list[str] = field(default_factory=list)


@dataclass
class RunConfig:
    name: str = "kchaos"
    seed: int | None = None
    nodes: int = 3                   # brokers (combined broker + controller nodes when controllers = 0)
    controllers: int = 0             # controller-only nodes beside them (isolated KRaft); 0: combined
    quorum: str = "static"           # the KRaft voter set: "static" (controller.quorum.voters) or "dynamic" (KIP-853)
    kafka_version: str = DEFAULT_KAFKA_VERSION
    # The version the rolling-upgrade fault rolls every node onto (nemesis/upgrade.py); None: no upgrade.
    upgrade_to: str | None = None
    base_image: str | None = None
    time_limit: float = 60.0
    rate: float = 200.0
    concurrency: int = 8
    recovery: float = 5.0
    drain_timeout: float = 120.0    # seconds the final drain of all partitions may take
    drain_wait: float = 60.0        # seconds to wait before the drain for every partition to be drainable
    sample_interval: float = 0.5
    store: str = "store"
    keep_cluster: bool = False
    backend: str = "docker"          # "docker": local containers; "ssh": the hosts of ``inventory``
    inventory: str | None = None     # SSH inventory (TOML), see infra/inventory.py
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    nemesis: NemesisConfig = field(default_factory=NemesisConfig)
    topic: dict[str, Any] = field(default_factory=lambda: {"min.insync.replicas": 2})
    broker: dict[str, Any] = field(default_factory=dict)
    broker_features: dict[str, int] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    checker: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_seed(self) -> "RunConfig":
        """A copy whose seed is fixed (drawn now if none was given)."""
        if self.seed is not None:
            return self
        return dataclasses.replace(self, seed=random.SystemRandom().randrange(1, 2**31))


_NESTED = {"workload": WorkloadConfig, "nemesis": NemesisConfig}
_FREE_TABLES = {"topic", "broker", "broker_features", "producer", "consumer", "checker"}


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _check_type(where: str, value: Any, default: Any) -> Any:
    """Coerce ints to floats where a float is expected; refuse other mismatches."""
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UsageError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, (int, float)) and (isinstance(value, bool) or not isinstance(value, type(default))):
        raise UsageError(f"{where} must be a number, got {value!r}")
    if isinstance(default, str) and not isinstance(value, str):
        raise UsageError(f"{where} must be a string, got {value!r}")
    if isinstance(default, list) and not isinstance(value, list):
        raise UsageError(f"{where} must be a list, got {value!r}")
    return value


# What a run adds to its stored config.json besides the config itself.
STORED_KEYS = ("schedule_digest", "client_settings", "workload_kind", "ran_on", "workload_seconds")


def from_dict(data: dict[str, Any], source: str = "config") -> RunConfig:
    top = _fields(RunConfig)
    unknown = sorted(set(data) - set(top))
    if unknown:
        raise UsageError(f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(top))}")
    cfg = RunConfig()
    for key, value in data.items():
        if key in _NESTED:
            if not isinstance(value, dict):
                raise UsageError(f"{source}: [{key}] must be a table")
            cls = _NESTED[key]
            sub_fields = _fields(cls)
            bad = sorted(set(value) - set(sub_fields))
            if bad:
                raise UsageError(f"{source}: unknown key {key}.{bad[0]!r}; valid keys: {', '.join(sorted(sub_fields))}")
            sub = cls()
            for k, v in value.items():
                setattr(sub, k, _check_type(f"{source}: {key}.{k}", v, getattr(sub, k)))
            setattr(cfg, key, sub)
        elif key in _FREE_TABLES:
            if not isinstance(value, dict):
                raise UsageError(f"{source}: [{key}] must be a table")
            setattr(cfg, key, dict(value))
        else:
            setattr(cfg, key, _check_type(f"{source}: {key}", value, getattr(cfg, key)))
    return cfg


def load(path: Path) -> RunConfig:
    """A TOML run config, or a config.json stored by an earlier run."""
    path = Path(path)
    if path.suffix == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(errors="replace"))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    else:
        data = load_toml(path, "config")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config is a table of keys")
    if path.suffix == ".json":
        for key in STORED_KEYS:
            data.pop(key, None)
    return from_dict(data, str(path))


def load_stored_facts(path: Path) -> dict[str, Any]:
    """What a run added to its config.json (STORED_KEYS: the digest, the software, the
    workload's real length, ...); {} when unreadable."""
    try:
        data = json.loads(Path(path).read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return {k: data[k] for k in STORED_KEYS if isinstance(data, dict) and k in data}


def override(cfg: RunConfig, **flags: Any) -> RunConfig:
    """CLI flags win over the file; None means "not given"."""
    for key, value in flags.items():
        if value is None:
            continue
        if "." in key:
            section, sub = key.split(".", 1)
            setattr(getattr(cfg, section), sub, value)
        else:
            setattr(cfg, key, value)
    return cfg


def validate(cfg: RunConfig) -> RunConfig:
    w = cfg.workload
    _validate_backend(cfg)
    if not 1 <= cfg.nodes <= MAX_NODES:
        raise UsageError(f"nodes must be between 1 and {MAX_NODES}, got {cfg.nodes}")
    validate_version(cfg.kafka_version)
    if cfg.time_limit <= 0:
        raise UsageError(f"time limit must be positive, got {cfg.time_limit:g}")
    if cfg.rate <= 0:
        raise UsageError(f"rate must be positive, got {cfg.rate:g}")
    if cfg.concurrency < 1:
        raise UsageError(f"concurrency must be at least 1, got {cfg.concurrency}")
    if not 0 <= cfg.drain_wait < float("inf"):
        raise UsageError(f"drain_wait must be a finite number of seconds, 0 or more, got {cfg.drain_wait:g}")
    names = workload_names()      # the [workload] names some kind (workloads/kinds.py) claims
    if w.name not in names:
        raise UsageError(f"unknown workload {w.name!r}; valid workloads: {', '.join(names)}")
    if w.mode not in MODES:
        raise UsageError(f"unknown workload mode {w.mode!r}; valid modes: {', '.join(MODES)}")
    if w.producer not in PRODUCERS:
        raise UsageError(f"unknown workload producer {w.producer!r}; valid producers: {', '.join(PRODUCERS)}")
    if not 1 <= w.in_flight <= MAX_IN_FLIGHT:
        raise UsageError(f"in_flight must be between 1 and {MAX_IN_FLIGHT}, got {w.in_flight}")
    if w.partitions < 1:
        raise UsageError(f"partitions must be at least 1, got {w.partitions}")
    if not 1 <= w.replication_factor <= cfg.nodes:
        raise UsageError(f"replication factor {w.replication_factor} must be between 1 and the node count {cfg.nodes}")
    misr = cfg.topic.get("min.insync.replicas", 1)
    misr = int(misr) if str(misr).strip().isdigit() else 1  # not a number: _validate_kafka_settings says so
    if misr > w.replication_factor:
        raise UsageError(f"min.insync.replicas {misr} is above the replication factor {w.replication_factor}")
    if not 0 <= w.send_fraction <= 1:
        raise UsageError(f"send_fraction must be between 0 and 1, got {w.send_fraction}")
    if w.max_batch < 1 or w.op_timeout <= 0:
        raise UsageError("max_batch must be at least 1 and op_timeout positive")
    if cfg.nemesis.interval <= 0:
        raise UsageError(f"nemesis interval must be positive, got {cfg.nemesis.interval:g}")
    budget = cfg.nemesis.budget
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise UsageError(f"nemesis budget must be a node count, 0 or more, got {budget!r}")
    if not 0 <= cfg.nemesis.recovery_window < float("inf"):
        raise UsageError(f"nemesis recovery_window must be a finite number of seconds, 0 or more, "
                         f"got {cfg.nemesis.recovery_window:g}")
    if cfg.nemesis.faults:
        packages = build_packages(list(cfg.nemesis.faults))  # raises UsageError naming the valid faults
        moved = sorted(k for k in ("log.dirs", "log.dir", "metadata.log.dir") if k in cfg.broker)
        if moved and any("power" in p.name for p in packages):
            raise UsageError(f"power-loss cuts the logs in kchaos's own log dir; it cannot run with [broker] "
                             f"{', '.join(moved)} set")
        nemeses_of(packages)      # packages whose nemeses claim the same op cannot run together
        validate_steps(cfg, packages)
        validate_planned_moves(cfg, packages)
    elif cfg.nemesis.steps:
        raise UsageError("nemesis.steps needs nemesis.faults: the fault packages that carry the steps out")
    validate_proxy(cfg)
    validate_layout(cfg)
    check_quorum(cfg.quorum, cfg.kafka_version, cfg.controllers, cfg.nemesis.faults)
    if cfg.seed is not None and not isinstance(cfg.seed, int):
        raise UsageError(f"seed must be an integer, got {cfg.seed!r}")
    if w.replay is not None:
        if not Path(w.replay).is_file():
            raise UsageError(f"workload.replay: {w.replay} is not a history file")
    validate_transactions(cfg)
    validate_group(cfg)
    validate_share(cfg)
    validate_client(cfg)
    validate_client_settings(cfg, workload_kind(cfg))
    _validate_upgrade(cfg)
    _validate_kafka_settings(cfg)
    return cfg


def _validate_upgrade(cfg: RunConfig) -> None:
    """upgrade_to names a newer release that resolves, and a fault rolls onto it."""
    upgrading = ROLLING_UPGRADE in {p.name for p in build_packages(list(cfg.nemesis.faults))} or any(
        s.get("f") == UPGRADE_NODE for s in cfg.nemesis.steps if isinstance(s, dict))
    if cfg.upgrade_to is None:
        if upgrading:
            raise UsageError(f'the {ROLLING_UPGRADE} fault needs the version to roll onto: upgrade_to = "4.3.1"')
        return
    if not isinstance(cfg.upgrade_to, str):
        raise UsageError(f"upgrade_to must be a Kafka version string, got {cfg.upgrade_to!r}")
    validate_version(cfg.upgrade_to)
    problem = upgrade_problem(cfg.kafka_version, cfg.upgrade_to)
    if problem is not None:
        raise UsageError(problem)
    if not upgrading:
        raise UsageError(f"upgrade_to {cfg.upgrade_to} needs the {ROLLING_UPGRADE} fault in [nemesis] faults "
                         "to roll the nodes onto it")
    check_available(cfg.upgrade_to)      # KafkaVersionNotFound (exit 64) for a release Maven Central lacks
    problem = check_settings(cfg.upgrade_to, cfg.broker, cfg.topic)
    if problem is not None:              # e.g. a key the newer release removed
        raise UsageError(f"after the upgrade to {cfg.upgrade_to}: {problem}")


def workload_kind(cfg: RunConfig) -> WorkloadKind:
    """The kind of workload the config's [workload] table runs (workloads/kinds.py)."""
    try:
        return kind_of(cfg.workload)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _validate_kafka_settings(cfg: RunConfig) -> None:
    """[broker] / [topic] settings, checked by Kafka's own config definitions
    offline (broker/settings_check.py): one line naming the key, exit 64."""
    if "elr-election" in cfg.nemesis.faults and not features(cfg.kafka_version).elr:
        raise UsageError(f"the elr-election scenario needs Eligible Leader Replicas (KIP-966, Kafka 4.0 "
                         f"and later); Kafka {cfg.kafka_version} has none")
    problem = (check_features(cfg.kafka_version, cfg.broker_features)
               or check_settings(cfg.kafka_version, cfg.broker, cfg.topic))
    if problem is not None:
        raise UsageError(problem)


def _validate_backend(cfg: RunConfig) -> None:
    """backend and inventory; with ssh, the inventory is read now (so a bad one
    costs exit 64 before anything starts) and decides the node counts: its
    hosts with role "controller" are the controllers, the others the nodes."""
    if cfg.backend not in BACKENDS:
        raise UsageError(f"unknown backend {cfg.backend!r}; valid backends: {', '.join(BACKENDS)}")
    if cfg.inventory is not None and not isinstance(cfg.inventory, str):
        raise UsageError(f"inventory must be a file path, got {cfg.inventory!r}")
    if cfg.backend == "docker":
        if cfg.inventory:
            raise UsageError('an inventory is given but backend is "docker"; set backend = "ssh" '
                             "(--inventory does that)")
        return
    if not cfg.inventory:
        raise UsageError('backend "ssh" needs an inventory file: inventory = "hosts.toml" or --inventory FILE')
    inv = load_inventory(cfg.inventory)  # raises InventoryError (a UsageError) naming the mistake
    cfg.inventory = str(inv.path)
    inv.require_controllers(cfg.controllers)
    controllers = len(inv.controllers)
    cfg.nodes, cfg.controllers = len(inv) - controllers, controllers
