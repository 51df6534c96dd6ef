"""Shrinking a failing run to a smaller schedule that still fails the same way.

A failing run is a schedule of a dozen faults; nobody knows which mattered.
``kchaos shrink`` searches for a smaller one, as property-based testing
shrinks a failing input: it proposes a smaller candidate, runs it, and keeps
it when it still fails with the anomaly types ``T`` that failed the original
(docs/design.md, "Shrinking a failure").

The plan is cut into **units** a step cannot be taken out of alone: a fault
package's start with its stop (a start without its stop would leave the fault
on to the end), and a scenario package's whole cycle (its steps only make
sense together). Candidates, in the order tried:

1. drop units: every package fault at once when a scenario package is in
   the mix (scenarios make their failure on purpose), then half of the units,
   a quarter, ... one at a time (delta debugging's ddmin, greedy: every
   success is kept at once);
2. move the units earlier, each a little after the previous one ends, and
   end the workload a recovery tail after the last step;
3. shorten each remaining package fault to half its duration;
4. halve the rate, then the concurrency, while they stay above a floor.

Pure: the search calls ``still_fails(config, change)`` for each candidate
(harness/shrink_cli.py runs it N times on real clusters) and keeps a path.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness import schedule
from harness.run_config import RunConfig
from nemesis.packages import FaultPackage, build_packages
from nemesis.upgrade import bind_upgrade

Step = tuple[float, dict[str, Any]]

TAIL_S = 20.0          # the workload's end after the last step: time for the damage to show and heal
GAP_S = 3.0            # between units, when moved earlier
MIN_RATE = 20.0
MIN_CONCURRENCY = 2


@dataclass(frozen=True)
class Unit:
    """Steps taken out or kept together: a package fault (start, stop) or a scenario cycle."""

    steps: tuple[Step, ...]
    package: str
    scenario: bool = False

    @property
    def start(self) -> float:
        return self.steps[0][0]

    @property
    def end(self) -> float:
        return self.steps[-1][0]


def units_of(cfg: RunConfig) -> list[Unit]:
    """The run's plan as units, ordered by their first step. An explicit plan
    (``nemesis.steps``) says its units (``unit``); a drawn one is cut again:
    the scenario packages' cycles drawn anew from the same RNG (nemesis.packages.plan
    draws them first), every other step a package fault's start or stop."""
    if cfg.nemesis.steps:
        by_unit: dict[Any, list[Step]] = {}
        for i, s in enumerate(cfg.nemesis.steps):
            by_unit.setdefault(s.get("unit", f"step-{i}"), []).append(
                (float(s["at"]), {"f": s["f"], "value": dict(s.get("value") or {})}))
        return sorted((Unit(tuple(sorted(steps, key=lambda st: st[0])), *_package_of(steps))
                       for steps in by_unit.values()), key=lambda u: u.start)
    packages = [bind_upgrade(p, cfg.upgrade_to, cfg.nodes, cfg.controllers)
                for p in build_packages(list(cfg.nemesis.faults))]
    rng = schedule.nemesis_rng(cfg.seed)
    out: list[Unit] = []
    in_cycles: set[str] = set()
    for p in packages:
        if not isinstance(p, FaultPackage):
            cycles = (p.plan_cycles(cfg.time_limit, cfg.nemesis.interval, rng) if hasattr(p, "plan_cycles")
                      else [p.plan(cfg.time_limit, cfg.nemesis.interval, rng)])   # e.g. the proxy's arm
            for cycle in cycles:
                out.append(Unit(tuple(cycle), p.name, scenario=True))
                in_cycles |= {_key(step) for step in cycle}
    fault_packages = [p for p in packages if isinstance(p, FaultPackage)]
    open_faults: dict[str, list[Step]] = {}
    for step in schedule.fault_plan(cfg):
        if _key(step) in in_cycles:
            continue
        f, value = step[1]["f"], step[1].get("value") or {}
        starting = [p for p in fault_packages if f in p.start_fs]
        if starting:
            pkg = next((p for p in starting if p.name == value.get("fault")), starting[0])
            open_faults[pkg.name] = [step]
        elif value.get("fault") in open_faults:
            out.append(Unit(tuple(open_faults.pop(value["fault"]) + [step]), value["fault"]))
        else:
            out.append(Unit((step,), str(value.get("fault"))))    # a stop with nothing open
    out += [Unit(tuple(steps), name) for name, steps in open_faults.items()]
    return sorted(out, key=lambda u: u.start)


def _package_of(steps: list[Step]) -> tuple[str, bool]:
    """(package name, whether a scenario cycle) of an explicit unit: a scenario's steps name it."""
    scenario = next((v["scenario"] for _, op in steps if isinstance(v := op.get("value"), dict)
                     and v.get("scenario")), None)
    if scenario is not None:
        return str(scenario), True
    value = steps[0][1].get("value") or {}
    return str(value.get("fault") or steps[0][1]["f"]), False


def _key(step: Step) -> str:
    return repr((round(step[0], 3), step[1]["f"], sorted((step[1].get("value") or {}).items(), key=str)))


def with_units(cfg: RunConfig, units: Sequence[Unit], time_limit: float | None = None) -> RunConfig:
    """A copy of ``cfg`` whose plan is exactly these units' steps."""
    out = copy.deepcopy(cfg)
    out.nemesis.steps = [{"at": round(at, 3), "f": op["f"], "value": dict(op.get("value") or {}), "unit": i}
                         for i, u in enumerate(sorted(units, key=lambda u: u.start)) for at, op in u.steps]
    out.nemesis.steps.sort(key=lambda s: s["at"])
    if not units:
        out.nemesis.faults = []       # no steps at all: an empty plan would mean "draw one"
    if time_limit is not None:
        out.time_limit = time_limit
    return out


@dataclass
class Attempt:
    change: str
    steps: int
    failed: bool


@dataclass
class ShrinkResult:
    original: RunConfig
    smallest: RunConfig
    units: list[Unit]
    path: list[Attempt] = field(default_factory=list)
    out_of_budget: bool = False


class OutOfBudget(Exception):
    pass


def shrink(cfg: RunConfig, still_fails: Callable[[RunConfig, str], bool],
           over_budget: Callable[[], bool] = lambda: False) -> ShrinkResult:
    """The smallest failing candidate found, and the path that led there."""
    units = units_of(cfg)
    result = ShrinkResult(cfg, with_units(cfg, units), list(units))

    def keep_if_fails(candidate: RunConfig, change: str, units: Sequence[Unit] | None = None) -> bool:
        """Run ``candidate``; when it still fails it becomes the smallest (with its units, if new)."""
        if over_budget():
            raise OutOfBudget
        failed = still_fails(candidate, change)
        result.path.append(Attempt(change, len(candidate.nemesis.steps), failed))
        if failed:
            result.smallest = candidate
            if units is not None:
                result.units = list(units)
        return failed

    try:
        _drop_units(keep_if_fails, result)
        _compact(keep_if_fails, result)     # a shorter workload makes every later run cheaper
        _shorten(keep_if_fails, result)
        _lower_load(keep_if_fails, result)
    except OutOfBudget:
        result.out_of_budget = True
    return result


def _drop_units(keep_if_fails, result: ShrinkResult) -> None:
    # A scenario package walks the cluster into a failure on purpose: first try it alone.
    others = [u for u in result.units if not u.scenario]
    if others and len(others) < len(result.units):
        kept = [u for u in result.units if u.scenario]
        keep_if_fails(with_units(result.smallest, kept), f"drop every package fault ({_describe(others)})", kept)
    chunk = max(1, len(result.units) // 2)
    while result.units and chunk >= 1:
        i = 0
        while i < len(result.units):
            units = result.units
            kept, gone = units[:i] + units[i + chunk:], units[i:i + chunk]
            if not (kept != units and keep_if_fails(with_units(result.smallest, kept), f"drop {_describe(gone)}",
                                                    kept)):
                i += chunk
        if chunk == 1:
            break
        chunk //= 2


def _shorten(keep_if_fails, result: ShrinkResult) -> None:
    for idx, unit in enumerate(list(result.units)):
        if unit.scenario or len(unit.steps) != 2 or unit.end - unit.start < 2.0:
            continue
        (start, stop) = unit.steps
        shorter = Unit((start, (round(start[0] + (stop[0] - start[0]) / 2, 3), stop[1])), unit.package)
        kept = result.units[:idx] + [shorter] + result.units[idx + 1:]
        keep_if_fails(with_units(result.smallest, kept),
                      f"shorten {unit.package} at {unit.start:.1f}s to {shorter.end - shorter.start:.1f}s", kept)


def _compact(keep_if_fails, result: ShrinkResult) -> None:
    units = result.units
    if not units:
        return
    moved: list[Unit] = []
    t = min(units[0].start, GAP_S)
    for unit in sorted(units, key=lambda u: u.start):
        shift = unit.start - t
        moved.append(Unit(tuple((round(at - shift, 3), op) for at, op in unit.steps), unit.package, unit.scenario))
        t = moved[-1].end + GAP_S
    limit = round(max(u.end for u in moved) + TAIL_S, 3)
    if limit >= result.smallest.time_limit and moved == units:
        return
    limit = min(limit, result.smallest.time_limit)
    keep_if_fails(with_units(result.smallest, moved, time_limit=limit),
                  f"move the faults earlier, workload {limit:g}s", moved)


def _lower_load(keep_if_fails, result: ShrinkResult) -> None:
    while result.smallest.rate / 2 >= MIN_RATE:
        candidate = copy.deepcopy(result.smallest)
        candidate.rate = result.smallest.rate / 2
        if not keep_if_fails(candidate, f"rate {candidate.rate:g}/s"):
            break
    while result.smallest.concurrency // 2 >= MIN_CONCURRENCY:
        candidate = copy.deepcopy(result.smallest)
        candidate.concurrency = result.smallest.concurrency // 2
        if not keep_if_fails(candidate, f"concurrency {candidate.concurrency}"):
            break


def _describe(units: Sequence[Unit]) -> str:
    return ", ".join(f"{u.package}@{u.start:.1f}s" for u in units)


def failing_share(runs: Sequence[set[str]], wanted: set[str]) -> float:
    """The share of runs that failed with every wanted anomaly type."""
    return sum(wanted <= r for r in runs) / len(runs) if runs else 0.0

