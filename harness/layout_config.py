"""Validation of a run's cluster layout: separate controllers and role targets.

Kept out of harness/run_config.py (which calls ``validate_layout`` from its
``validate``) so a mistake here, too, costs one line and exit 64 before any
cluster starts (docs/design.md, "Isolated KRaft").
"""
from __future__ import annotations

from typing import Any

from harness.client_config import TOPIC, run_group_id
from infra.docker_backend import validate_controller_count
from infra.errors import UsageError
from nemesis.roles import check_targets
from workloads.txn import transactional_id


def validate_layout(cfg: Any) -> None:
    """``controllers`` is 0 (combined nodes) or a controller count the backend
    can place (on SSH hosts, the inventory's count: harness/run_config.py); ``nemesis.targets`` and role targets in ``nemesis.steps`` exist
    on that layout."""
    if isinstance(cfg.controllers, bool) or not isinstance(cfg.controllers, int):
        raise UsageError(f"controllers must be a node count, got {cfg.controllers!r}")
    validate_controller_count(cfg.controllers)
    if not isinstance(cfg.nemesis.targets, list):
        raise UsageError(f"nemesis.targets must be a list of role targets, got {cfg.nemesis.targets!r}")
    check_targets([str(t) for t in cfg.nemesis.targets], cfg.controllers, cfg.nemesis.steps, run_ids(cfg))


def run_ids(cfg: Any) -> dict[str, list[str]]:
    """The ids whose coordinators faults may aim at (nemesis.roles): the
    consumer group of a subscribe run, the share group of a share run (with
    its topic: a share coordinator holds one share-partition's state), every
    worker's transactional id of a transactional one."""
    ids: dict[str, list[str]] = {}
    if cfg.workload.mode == "subscribe":
        ids["group"] = [run_group_id(cfg)]
    if cfg.workload.mode == "share":
        ids["share_group"] = [run_group_id(cfg)]
        ids["topic"] = [TOPIC]
    if cfg.workload.transactions:
        ids["transactional_id"] = [transactional_id(cfg.seed, w) for w in range(cfg.concurrency)]
    return ids
