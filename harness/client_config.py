"""What a run config means for its clients: the topic, the consumers' group
id, the share of commits, the context each worker's process opens its client
with, and librdkafka's word on the settings before any cluster starts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from infra.errors import UsageError
from workloads.client import ClientContext, check_settings
from workloads.kinds import WorkloadKind

if TYPE_CHECKING:   # run_config imports this module: for the annotations only
    from harness.run_config import RunConfig

TOPIC = "kchaos"
DEFAULT_COMMIT_FRACTION = 0.1


def effective_commit_fraction(cfg: RunConfig) -> float:
    """The share of ops that are commits: ``commit_fraction``, by default 0.1
    in subscribe mode and 0 in assign mode (assigned consumers are no group members)."""
    w = cfg.workload
    if w.commit_fraction is not None:
        return float(w.commit_fraction)
    return DEFAULT_COMMIT_FRACTION if w.mode == "subscribe" else 0.0


def run_group_id(cfg: RunConfig) -> str:
    """The consumers' group id: ``[consumer] "group.id"``, else ``[workload]
    group_id``, else ``kchaos-<seed>``."""
    if "group.id" in cfg.consumer:
        return str(cfg.consumer["group.id"])
    if cfg.workload.group_id is not None:
        return str(cfg.workload.group_id)
    return f"kchaos-{cfg.seed}"


def client_context(cfg: RunConfig, bootstrap: str = "", process: int = 0) -> ClientContext:
    """What process ``process``'s client needs of the run config to talk to the cluster at ``bootstrap``."""
    w = cfg.workload
    return ClientContext(
        bootstrap=bootstrap, topic=TOPIC, partitions=w.partitions, process=process,
        producer_config=dict(cfg.producer), consumer_config=dict(cfg.consumer),
        mode=w.mode, group_id=run_group_id(cfg), op_timeout_s=w.op_timeout,
        poll_max_messages=w.poll_max_messages, poll_timeout_s=w.poll_timeout)


def offline_client_context(cfg: RunConfig) -> ClientContext:
    """A worker's client context without a cluster (no bootstrap address)."""
    return client_context(cfg)


def validate_client_settings(cfg: RunConfig, kind: WorkloadKind) -> None:
    """Every [producer] / [consumer] setting, checked by librdkafka itself: the
    clients the workers (and the drain) would build from this config are built
    offline and closed, so a typo costs one line naming the key and exit 64
    before any cluster starts; then the kind's own clients' settings (the
    transactional producer's). The bootstrap address is the cluster's and not
    known yet (check_settings leaves it out)."""
    ctx = offline_client_context(cfg)
    for check in (check_settings, kind.check_settings):
        if check is None:
            continue
        try:
            check(ctx)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
