"""The [workload] table's checks by what it asks for: transactions, consumer
groups and their rebalance protocols, share groups, the client library. Part
of ``harness.run_config.validate`` (one line and exit 64 before anything
starts), kept apart so that each module fits one reading."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.client_config import effective_commit_fraction, run_group_id, validate_driver_command
from infra.distribution import validate_version
from infra.errors import UsageError
from infra.kafka_versions import features, parse_version
from workloads.group import group_protocol_problem
from workloads.kinds import CLIENTS
from workloads.share_plan import config_problem

if TYPE_CHECKING:      # run_config imports this module: the type only, for the hints
    from harness.run_config import RunConfig


def is_false(value: Any) -> bool:
    return value is False or str(value).strip().lower() in ("false", "0")


def validate_transactions(cfg: RunConfig) -> None:
    """Transactions and client crashes: ranges, and the combinations Kafka or
    kchaos cannot run (one line, exit 64)."""
    w = cfg.workload
    if not 0 <= w.abort_probability <= 1:
        raise UsageError(f"abort_probability must be between 0 and 1, got {w.abort_probability:g}")
    if w.txn_max_ops < 1:
        raise UsageError(f"txn_max_ops must be at least 1, got {w.txn_max_ops}")
    if not 0 <= w.crash_interval < float("inf"):
        raise UsageError(f"crash_interval must be a finite number of seconds, 0 (no crashes) or more, "
                         f"got {w.crash_interval:g}")
    isolation = cfg.consumer.get("isolation.level")
    if isolation is not None and isolation not in ("read_committed", "read_uncommitted"):
        raise UsageError(f'consumer."isolation.level": must be "read_committed" or "read_uncommitted", '
                         f"got {isolation!r}")
    if "transactional.id" in cfg.producer:
        raise UsageError('producer."transactional.id" is set by kchaos, one per worker: use [workload] '
                         "transactions = true instead")
    if w.txn_send_offsets and not w.transactions:
        raise UsageError("txn_send_offsets needs transactions = true")
    if not w.transactions:
        return
    if w.producer == "pipelined":
        raise UsageError('transactions = true cannot run with producer = "pipelined": a txn op is a '
                         "whole transaction")
    if w.mode != "assign":
        raise UsageError(f'transactions = true needs mode = "assign" (the txn consumer assigns its '
                         f"partitions), got {w.mode!r}")
    idem = cfg.producer.get("enable.idempotence", True)
    if is_false(idem):
        raise UsageError("transactions = true needs an idempotent producer; producer.\"enable.idempotence\" "
                         "is false")
    acks = cfg.producer.get("acks", cfg.producer.get("request.required.acks", "all"))
    if str(acks).strip().lower() not in ("all", "-1"):
        raise UsageError(f'transactions = true needs producer.acks = "all" (or -1), got {acks!r}')


def validate_share(cfg: RunConfig) -> None:
    """Share groups (workloads/share_plan.py): a Kafka with them, and the share knobs (one line, exit 64)."""
    if cfg.workload.mode == "share":
        problem = config_problem(cfg.workload, features(cfg.kafka_version).share_groups, cfg.kafka_version,
                                 cfg.broker, cfg.broker_features)
        if problem:
            raise UsageError(problem)


def validate_group(cfg: RunConfig) -> None:
    """Consumer groups: commit shares, the group id, and the settings that
    would commit what the history cannot show (one line, exit 64)."""
    w = cfg.workload
    for key in ("commit_fraction", "async_commit_probability"):
        value = getattr(w, key)
        if value is None and key == "commit_fraction":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise UsageError(f"{key} must be between 0 and 1, got {value!r}")
    if w.group_id is not None and not isinstance(w.group_id, str):
        raise UsageError(f"group_id must be a string, got {w.group_id!r}")
    problem = group_protocol_problem(cfg.consumer, w.group_protocols, w.mode, parse_version(cfg.kafka_version))
    if problem is not None:
        raise UsageError(problem)
    commits = effective_commit_fraction(cfg)
    if w.mode == "assign":
        if commits:
            raise UsageError(f'commit_fraction {commits:g} needs mode = "subscribe": assigned consumers '
                             "are not group members and commit nothing")
        return
    if w.send_fraction + commits > 1:
        raise UsageError(f"send_fraction {w.send_fraction:g} + commit_fraction {commits:g} is above 1")
    if (w.group_id is not None and "group.id" in cfg.consumer
            and str(cfg.consumer["group.id"]) != w.group_id):
        raise UsageError(f'[workload] group_id {w.group_id!r} and consumer."group.id" '
                         f'{cfg.consumer["group.id"]!r} differ; set one')
    if not run_group_id(cfg).strip():
        raise UsageError(f'mode = "{w.mode}" needs a group id; [workload] group_id or consumer."group.id" is empty')
    for key in ("enable.auto.commit", "enable.auto.offset.store"):
        if commits and key in cfg.consumer and not is_false(cfg.consumer[key]):
            raise UsageError(f'consumer."{key}" = {cfg.consumer[key]!r} with commit ops (commit_fraction '
                             f"{commits:g}): librdkafka would commit offsets the history does not show; "
                             "leave it unset (false)")


def validate_client(cfg: RunConfig) -> None:
    """[workload] client, client_version and driver_command: a known client,
    an external one's command line, and for the Java client a version, the cluster's when none is given (so config.json records
    the exact one)."""
    w = cfg.workload
    if w.client not in CLIENTS:
        raise UsageError(f"unknown client {w.client!r}; clients: {', '.join(CLIENTS)}")
    validate_driver_command(w)
    if w.client == "external":
        return
    if w.client == "librdkafka":
        if w.client_version:
            raise UsageError(f'client_version {w.client_version!r} is for client = "java"; librdkafka\'s is '
                             "the installed confluent-kafka's")
        return
    if not w.client_version:
        w.client_version = cfg.kafka_version
    validate_version(w.client_version)
