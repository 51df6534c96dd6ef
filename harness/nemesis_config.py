"""Checks of the [nemesis] keys that hold lists of tables: an explicit plan
(``steps``, written by kchaos shrink and replay) and the protocol proxy's rules
(``proxy``), and what the planned-moves package needs. Each bad entry is one
line naming it (exit 64), before anything starts."""
from __future__ import annotations

from typing import Any

from infra.errors import UsageError
from nemesis.operations import MOVES, PLANNED_MOVES
from nemesis.packages import nemeses_of
from nemesis.proxy_rules import parse_rules


def validate_steps(cfg: Any, packages: list) -> None:
    """An explicit plan: each step a table {at, f, value} with 0 <= at < time_limit and an op
    one of the packages' nemeses handles."""
    handled = frozenset().union(*(nem.fs for nem in nemeses_of(packages)))
    for i, step in enumerate(cfg.nemesis.steps, start=1):
        where = f"nemesis.steps[{i}]"
        if not isinstance(step, dict) or set(step) - {"at", "f", "value", "unit"}:
            raise UsageError(f"{where} must be a table of at, f, value (and unit), got {step!r}")
        at = step.get("at")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < cfg.time_limit:
            raise UsageError(f"{where}.at must be seconds from 0 to below the time limit {cfg.time_limit:g}, "
                             f"got {at!r}")
        if step.get("f") not in handled:
            raise UsageError(f"{where}.f {step.get('f')!r} is no op of the packages {', '.join(cfg.nemesis.faults)}; "
                             f"they handle {', '.join(sorted(handled))}")
        if not isinstance(step.get("value", {}), dict):
            raise UsageError(f"{where}.value must be a table, got {step.get('value')!r}")


def validate_proxy(cfg: Any) -> None:
    """The proxy's rules parse (one line naming the bad key otherwise) and
    come with the fault that arms them."""
    parse_rules(cfg.nemesis.proxy)
    armed = "proxy" in {f.strip().lower() for entry in cfg.nemesis.faults for f in str(entry).split(",")}
    if cfg.nemesis.proxy and not armed:
        raise UsageError('[[nemesis.proxy]] rules need the "proxy" fault in [nemesis] faults to arm them')
    if armed and not cfg.nemesis.proxy:
        raise UsageError('the "proxy" fault needs at least one [[nemesis.proxy]] rule')


def validate_planned_moves(cfg: Any, packages: list) -> None:
    """Planned moves hand a partition's leadership to a follower: a topic with
    one replica has none, so every move would fail; and they act on a leader,
    so a step naming another target cannot work."""
    if PLANNED_MOVES not in {p.name for p in packages}:
        return
    if cfg.workload.replication_factor < 2:
        raise UsageError(f"planned-moves moves a partition's leadership to a follower; replication factor "
                         f"{cfg.workload.replication_factor} leaves none (set [workload] replication_factor >= 2)")
    for i, step in enumerate(cfg.nemesis.steps, start=1):
        target = (step.get("value") or {}).get("target", "leader")
        if step.get("f") in MOVES and target != "leader":
            raise UsageError(f"nemesis.steps[{i}]: {step['f']} acts on a partition's leader "
                             f"(target 'leader'), got target {target!r}")
