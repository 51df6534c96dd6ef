"""Fault packages: a nemesis with its schedule, its final heal and its colour.

``build_packages(["partition,kill"])`` picks packages by name; ``plan`` turns
them into a fault timeline, deterministically from one seeded RNG; the runner
invokes each op of the timeline on ``build_nemesis(packages, ctx)`` at its
time, then the packages' ``final_ops`` (or ``heal_all``) in its final phase.
What each package's start ops look like (their abstract targets) is drawn in
``nemesis.draws``.
"""
from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from broker.cluster import KafkaCluster
from broker.lifecycle import PROCESS_PATTERN
from infra.errors import UsageError
from infra.node import Node, shell_join
from nemesis import clock, netem, operations, partition, power, process, quorum, upgrade
from nemesis.draws import (draw_clock, draw_client_cut_leader, draw_kill, draw_netem, draw_partition, draw_pause,
                           draw_planned_move, draw_power, draw_quorum_change)
from nemesis.budget import Budget, Cost, fits, op_costs
from nemesis.protocol import ComposedNemesis, Nemesis, NemesisContext, Op, compose, each, node_names
from nemesis.proxy_nemesis import ProxyPackage

log = logging.getLogger(__name__)

REDRAWS = 10  # a budgeted plan's tries to draw a start that fits


@dataclass(frozen=True)
class FaultPackage:
    """One kind of fault. ``draw_start(rng, t, time_limit_s)`` returns the value
    of a start op; ``stop`` ends whatever the start began."""

    name: str
    color: str
    start_fs: tuple[str, ...]
    stop_f: str
    make_nemesis: Callable[[], Nemesis]
    draw_start: Callable[[random.Random, float, float], Op]
    final: tuple[Op, ...] = field(default_factory=tuple)

    @property
    def fs(self) -> frozenset[str]:
        return frozenset(self.start_fs) | {self.stop_f}

    def stop_op(self) -> Op:
        return {"f": self.stop_f, "value": {"fault": self.name}}

    def final_ops(self) -> list[Op]:
        return [copy_op(op) for op in self.final]


def copy_op(op: Op) -> Op:
    return {"f": op["f"], "value": dict(op.get("value") or {})}


PACKAGES: dict[str, FaultPackage] = {
    "partition": FaultPackage(
        "partition", "#e8590c", (partition.START_PARTITION,), partition.STOP_PARTITION, partition.PartitionNemesis,
        draw_partition, ({"f": partition.STOP_PARTITION, "value": {"fault": "partition"}},)),
    "kill": FaultPackage(
        "kill", "#c2255c", (process.KILL,), process.RESTART, process.KillNemesis, draw_kill,
        ({"f": process.RESTART, "value": {"fault": "kill", "target": "all"}},)),
    "pause": FaultPackage(
        "pause", "#1971c2", (process.PAUSE,), process.RESUME, process.PauseNemesis, draw_pause,
        ({"f": process.RESUME, "value": {"fault": "pause", "target": "all"}},)),
    "clock": FaultPackage(
        "clock", "#2f9e44", (clock.BUMP, clock.STROBE), clock.RESET, clock.ClockNemesis, draw_clock,
        ({"f": clock.RESET, "value": {"fault": "clock"}},)),
    "netem": FaultPackage(
        "netem", "#f08c00", (netem.START_NETEM,), netem.STOP_NETEM, netem.NetemNemesis, draw_netem,
        ({"f": netem.STOP_NETEM, "value": {"fault": "netem"}},)),
}
# Packages chosen by name only, not part of ``all`` (they share ops with one above).
BY_NAME_ONLY: dict[str, FaultPackage] = {
    "client-cut-leader": FaultPackage(
        "client-cut-leader", "#d6336c", (partition.START_PARTITION,), partition.STOP_PARTITION,
        partition.PartitionNemesis, draw_client_cut_leader,
        ({"f": partition.STOP_PARTITION, "value": {"fault": "partition"}},)),
    # Loses what Kafka never fsynced (acknowledged writes too, on default flush
    # settings): a finding of its own, so never in the default mix.
    "power-loss": FaultPackage(
        "power-loss", "#5c940d", (power.POWER_LOSS,), power.POWER_ON, power.PowerLossNemesis, draw_power,
        ({"f": power.POWER_ON, "value": {"fault": power.FAULT, "target": "all"}},)),
    # Leader moves an operator makes on purpose (KAFKA-20554): a finding of their own under acks=1.
    "planned-moves": FaultPackage(
        "planned-moves", "#862e9c", operations.MOVES, operations.END_MOVE, operations.PlannedMovesNemesis,
        draw_planned_move, ({"f": operations.END_MOVE, "value": {"fault": operations.PLANNED_MOVES,
                                                                  "target": "all"}},)),
    # Controllers removed from a dynamic quorum and put back (KIP-853, KAFKA-17608).
    "quorum-changes": FaultPackage(
        "quorum-changes", "#0c8599", (quorum.REMOVE_CONTROLLER,), quorum.ADD_CONTROLLER, quorum.QuorumNemesis,
        draw_quorum_change, ({"f": quorum.ADD_CONTROLLER, "value": {"fault": quorum.QUORUM_CHANGES,
                                                                     "target": "all"}},)),
    # The protocol proxy's rules ([[nemesis.proxy]]), armed for the whole workload.
    "proxy": ProxyPackage(),  # type: ignore[dict-item]  # plans itself, as scenario packages do
    # One roll of every node onto the run's upgrade_to, then the metadata.version bump (nemesis.upgrade).
    upgrade.ROLLING_UPGRADE: upgrade.RollingUpgradePackage(),  # type: ignore[dict-item]  # plans itself
}
# The order final heals run in: the network first (so restarted brokers can
# talk), then paused processes, clocks, and last the restarts.
HEAL_ORDER = ("partition", "netem", "pause", "clock", "kill", "power-loss")


def build_packages(names: Iterable[str]) -> list[FaultPackage]:
    """Packages by name: each entry may hold several, comma separated;
    ``all`` is every package, ``none`` none. Order of first mention, no repeats."""
    from nemesis.scenarios import SCENARIOS     # here: scenarios imports this module (its PACKAGES) at the top
    out: list = []
    valid = ", ".join([*PACKAGES, "all", "none", *BY_NAME_ONLY, *SCENARIOS])
    for entry in names:
        for raw in str(entry).split(","):
            name = raw.strip().lower()
            if not name or name == "none":
                continue
            if name == "all":
                picked = list(PACKAGES.values())
            elif name in PACKAGES:
                picked = [PACKAGES[name]]
            elif name in BY_NAME_ONLY:
                picked = [BY_NAME_ONLY[name]]
            elif name in SCENARIOS:
                picked = [SCENARIOS[name]]
            else:
                raise UsageError(f"unknown fault package {raw.strip()!r}; valid choices: {valid}")
            out += [p for p in picked if p not in out]
    return out


def _step_time(t: float, time_limit_s: float) -> float:
    """A step's time to the millisecond, never rounded up to the time limit or past it
    (a step at the limit would never run: the workload ends there)."""
    at = round(t, 3)
    return at if at < time_limit_s else math.floor(t * 1000) / 1000


def plan(packages: Sequence[FaultPackage], time_limit_s: float, interval_s: float,
         rng: random.Random, budget: Budget | None = None) -> list[tuple[float, Op]]:
    """The fault timeline: (seconds since the workload started, op), sorted.

    Every ``interval_s`` on average (uniformly 0.5x to 1.5x), one package drawn
    at random takes its next step: a start when it is idle, else its stop. So
    faults of different packages overlap, a package never has two faults at
    once, and each start is followed by its stop. Faults still on when the
    time limit nears are stopped, in start order, between the last step and
    the time limit. Deterministic from ``rng``.

    With a ``budget`` (nemesis.budget), the costs of the faults on at once
    never exceed ``budget.nodes``: a start that does not fit is drawn again (up
    to REDRAWS times) when nothing costly is on, else the step stops the
    costly fault that started first instead. A start that costs anything
    never comes sooner than ``budget.recovery_s`` after a stop: it moves to
    the end of that recovery window. Scenario packages plan their own steps,
    outside the budget.
    """
    if interval_s <= 0:
        raise UsageError(f"the nemesis interval must be positive, got {interval_s}")
    out: list[tuple[float, Op]] = []
    if not packages or time_limit_s <= 0:
        return out
    scenario_ops = [step for p in packages if not isinstance(p, FaultPackage)
                    for step in p.plan(time_limit_s, interval_s, rng)]
    packages = [p for p in packages if isinstance(p, FaultPackage)]
    if not packages:
        return sorted(scenario_ops, key=lambda step: step[0])
    active: dict[str, tuple[Op, Cost]] = {}  # package -> (its stop op, its start's cost)
    t = 0.0
    quiet_until = 0.0
    while True:
        t += rng.uniform(0.5, 1.5) * interval_s
        if t >= time_limit_s:
            break
        pkg = packages[rng.randrange(len(packages))]
        if pkg.name in active:
            out.append((_step_time(t, time_limit_s), active.pop(pkg.name)[0]))
            quiet_until = t + (budget.recovery_s if budget else 0.0)
            continue
        start = pkg.draw_start(rng, t, time_limit_s)
        cost: Cost = (0, 0)
        if budget is not None:
            held = [c for _, c in active.values()]
            cost = op_costs(start, budget)
            costly = [name for name, (_, c) in active.items() if any(c)]
            if not fits(budget, held, cost) and costly:
                out.append((_step_time(t, time_limit_s), active.pop(costly[0])[0]))  # make room instead
                quiet_until = t + budget.recovery_s
                continue
            for _ in range(REDRAWS):
                if fits(budget, held, cost):
                    break
                start = pkg.draw_start(rng, t, time_limit_s)
                cost = op_costs(start, budget)
            if not fits(budget, held, cost):
                continue  # this package has nothing that fits: a quiet step
            if any(cost) and t < quiet_until:
                t = quiet_until
                if t >= time_limit_s:
                    break
        out.append((_step_time(t, time_limit_s), start))
        active[pkg.name] = (pkg.stop_op(), cost)
    last = out[-1][0] if out else 0.0
    pending = [stop for stop, _ in active.values()]
    for i, op in enumerate(pending, start=1):
        out.append((_step_time(last + (time_limit_s - last) * i / (len(pending) + 1), time_limit_s), op))
    return sorted(out + scenario_ops, key=lambda step: step[0])


def final_ops(packages: Sequence[FaultPackage]) -> list[Op]:
    """The packages' final heal ops, in HEAL_ORDER."""
    by_name = {p.name: p for p in packages}
    out: list[Op] = []
    for name in HEAL_ORDER:
        if name in by_name:
            out += by_name.pop(name).final_ops()
    for p in by_name.values():  # packages not in HEAL_ORDER, in their order
        out += p.final_ops()
    return out


def nemeses_of(packages: Sequence[FaultPackage]) -> list[Nemesis]:
    """One nemesis of each kind the packages need. Packages that share a kind (a
    scenario reuses the partition and kill nemeses; ``partition`` and
    ``client-cut-leader`` share one) share its one instance, so a mix such as
    ``unclean-election,partition,kill`` works; their faults may overlap and end
    each other's, as faults of different packages do. Raises UsageError when two
    kinds claim the same op."""
    unique: dict[type, Nemesis] = {}

    def flat(nems: Iterable[Any]) -> Iterable[Any]:
        for nem in nems:
            yield from flat(nem.nemeses) if isinstance(nem, ComposedNemesis) else (nem,)

    for nem in flat(p.make_nemesis() for p in packages):
        unique.setdefault(type(nem), nem)
    try:
        compose(unique.values())
    except ValueError as exc:
        raise UsageError(f"these fault packages cannot run together: {exc}") from None
    return list(unique.values())


def build_nemesis(packages: Sequence[FaultPackage], ctx: NemesisContext) -> Nemesis:
    """The packages' nemeses composed into one, already ``setup(ctx)``
    (setup is idempotent and clears leftovers of each kind of fault)."""
    nem = compose(nemeses_of(packages))
    nem.setup(ctx)
    return nem


def colors(packages: Iterable[FaultPackage]) -> dict[str, str]:
    return {p.name: p.color for p in packages}


# -- heal everything ---------------------------------------------------------------
SKEW_MARK = "kchaos-skewed"


def heal_node_script() -> str:
    """Remove the chain and our netem qdiscs, chains and delayer, stop any clock strobe, reset the
    clock, SIGCONT the broker. Prints SKEW_MARK when the clock was off true time (or strobing)."""
    pattern = shell_join([PROCESS_PATTERN])
    faketime = clock.FAKETIME_FILE
    return "\n".join([
        "rc=0",
        f"if pgrep -f {shell_join([clock.STROBE_PATTERN])} >/dev/null 2>&1 || "
        f"{{ [ -f {faketime} ] && ! grep -qx '+0s' {faketime}; }}; then echo {SKEW_MARK}; fi",
        f"( {partition.heal_script()} ) || rc=1",
        f"( {netem.heal_script()} ) || rc=1",
        f"( {clock._stop_strobe()}; {clock._write(clock.offset_text(0))} ) || rc=1",
        f"pkill -CONT -f {pattern} 2>/dev/null || true",
        "exit $rc",
    ])


def heal_all(cluster: KafkaCluster, restart_dead: bool = False, restart_skewed: bool = False,
             timeout_s: float = 30.0, restart_timeout_s: float = 90.0) -> dict[str, str]:
    """Heal every fault on every reachable node: remove the KCHAOS chain and our
    netem qdiscs, chains and delayer, reset
    the clock to +0s (stopping strobes), SIGCONT the broker. Then, with
    ``restart_dead``, start brokers that are not running, and with
    ``restart_skewed``, restart (SIGTERM + start) brokers whose clock was off:
    Kafka's timers (KRaft fetch and election timeouts, ISR lag) run on wall
    time, and once it goes back they stall for as long as it went back.

    Errors are per node and never raised: returns {node: status}, status one of
    "ok", "restarted", "restarted (clock was skewed)", or an error text.
    """
    def heal(node: Node) -> bool:
        return SKEW_MARK in node.run(["sh", "-c", heal_node_script()], timeout=timeout_s).out

    skewed, errors = each(heal, cluster.nodes, key=lambda n: n.name)
    names = node_names(cluster)
    report = {n: "ok" for n in skewed}
    report.update(errors)

    if restart_skewed:
        # One at a time, like a rolling restart, so the quorum stays up.
        for name in [n for n in names if skewed.get(n)]:
            try:
                if cluster.brokers[name].is_running():
                    process.stop_start(cluster, name, restart_timeout_s)
                    report[name] = "restarted (clock was skewed)"
            except Exception as exc:
                report[name] = f"healed, restart failed: {type(exc).__name__}: {exc}"
    if restart_dead:
        started, rerrors = each(lambda n: process.ensure_running(cluster, n, restart_timeout_s),
                                [n for n in names if n in skewed])
        report.update({n: "restarted" for n, did in started.items() if did})
        report.update({n: f"healed, restart failed: {err}" for n, err in rerrors.items()})
    for n, err in errors.items():
        log.warning("heal of %s failed: %s", n, err)
    return {n: report[n] for n in names if n in report}
