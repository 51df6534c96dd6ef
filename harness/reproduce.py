"""What `kchaos reproduce` compares: what ran, not what was planned.

A reproduction is the same as its original when the two runs

* executed the same fault sequence: the nemesis ops that completed with an
  ``action`` (start / stop / heal; a fault op that failed, or never completed,
  did not execute and is left out), each as (f, action, fault kind, planned
  target, sorted nodes, invoke time), in the same order and as many; each
  step's gap after the previous nemesis op completed (what fault pacing keeps
  as planned: harness/fault_pacing.py) agrees within a tolerance (default
  5 s). The invoke times since the workload started (the first client op)
  are shown, not compared: they drift by as long as earlier steps took (a
  kill waits for the process to die, a scenario for the ISR to shrink), more
  on a loaded machine. The final phase's heals (invoked after the workload's
  time limit in both runs) run when the workers have stopped, which takes as
  long as their last ops do, so only their order, kind and nodes are compared;
* found the same anomaly types (count above zero and not allowed);
* reached the same verdict (valid / invalid / unknown).

Targets resolved at run time. A plan names its targets abstractly
(``nemesis.packages``): some are fixed by the plan and the node count
(``node_index``, ``all``, a seeded ``minority``, seeded partition topologies
such as ``halves``), others are resolved when the fault happens from the
cluster's state (``leader``, ``controller``, an unseeded ``random``, the
partition topologies ``isolate-leader`` and ``isolate-controller``). A
reproduction may legitimately hit another node for the latter, so the
comparison always compares the planned target (the target, topology, index
or seed the plan drew) and compares the resolved nodes only when the plan
fixed them; for a run-time target a node difference is shown as a note, not a
mismatch. A stop or heal inherits this from the start(s) it ends.

Two questions, answered apart. *Did everything match*: the three points
above (``Comparison.matches``). *Did the failure come back*: for an original
that was not valid, the reproduction reached the same verdict with every
anomaly type that failed the original among its own; more types do not make
it another failure (``Comparison.failure_came_back``). The software the runs
ran on (config.json's ``ran_on``, harness/provenance.py) is compared first and
shown as notes: another commit or library version does not decide either answer.

The planned-schedule digest (``schedule.digest``: the plan recomputed from
config.json) is only a cheap first check that config.json and the schedule
code still give the original plan; it says nothing about what ran, and does
not decide the outcome.

Pure functions on ops and results; ``load_run`` and ``render`` read files
and print.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rich.table import Table
from rich.text import Text

from harness import run_config
from harness.provenance import differences
from history.fault_intervals import affected_nodes, nemesis_ops
from history.ops import (ACTION_HEAL, ACTION_START, ACTION_STOP, NEMESIS, HistoryFormatError, Op, read_history,
                         workload_start_ns)
from infra.errors import UsageError
from reports.load import VALID, anomaly_rows, verdict_of

DEFAULT_TIME_TOLERANCE_S = 5.0

# Planned targets the nemesis resolves from the cluster's state when it acts.
RUNTIME_TARGETS = frozenset({"leader", "controller"})
RUNTIME_TOPOLOGIES = frozenset({"isolate-leader", "isolate-controller"})
_PLAN_KEYS = ("node", "node_index", "partition", "partition_index", "seed")


@dataclass(frozen=True)
class FaultStep:
    """One executed fault op."""

    f: str
    action: str
    fault: str | None
    nodes: tuple[str, ...] | None   # sorted; None when the op named none
    at_s: float                     # invoke time, seconds since the workload started
    target: str = ""                # the planned target, e.g. "leader partition_index=557"
    fixed: bool = True              # the plan fixed the nodes (not resolved at run time)
    gap_s: float | None = None      # seconds after the previous nemesis op completed (the workload's start)

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        return (self.f, self.action, self.fault, self.target)

    def describe(self) -> str:
        nodes = "-" if self.nodes is None else ",".join(self.nodes) or "none"
        target = f" [{self.target}]" if self.target else ""
        return f"{self.at_s:7.1f}s  {self.f} ({self.action} {self.fault or 'all'}){target} -> {nodes}" + \
            ("" if self.fixed else " (run-time target)")


def planned_target(value: Any) -> tuple[str, bool | None]:
    """(label of the planned target, whether the plan fixes the nodes) of a
    nemesis value; (\"\", None) when it names no target (a stop or heal)."""
    if not isinstance(value, dict):
        return "", None
    topology, target = value.get("topology"), value.get("target")
    if topology is None and target is None and not any(value.get(k) is not None for k in _PLAN_KEYS):
        return "", None
    parts = [str(topology if topology is not None else target if target is not None else "node")]
    parts += [f"{k}={value[k]}" for k in _PLAN_KEYS if value.get(k) is not None
              and not (k == "partition" and "partition_index" in value)]  # the resolved partition
    # A topology and a target can come together (a one-way cut of the leader): both must be fixed.
    fixed = topology not in RUNTIME_TOPOLOGIES
    if target == "random":
        fixed = fixed and value.get("seed") is not None
    elif target in RUNTIME_TARGETS:
        fixed = False
    return " ".join(parts), fixed


def executed_faults(ops: Iterable[Op]) -> list[FaultStep]:
    """The fault sequence a history executed, in invocation order."""
    ops = list(ops)
    origin = workload_start_ns(ops)
    out: list[FaultStep] = []
    active: dict[str | None, bool] = {}  # fault kind -> whether its start's nodes were fixed by the plan
    last_end = origin                    # the previous nemesis op's completion, any op (a scenario's waits too)
    for ev in nemesis_ops(op for op in ops if op.get("process") == NEMESIS):
        gap_s, last_end = round((ev.invoke_time - last_end) / 1e9, 3), max(last_end, ev.end_time)
        if ev.action is None:
            continue
        label, fixed = planned_target(ev.planned if ev.planned is not None else ev.value)
        if ev.action == ACTION_START:
            fixed = True if fixed is None else fixed
            active[ev.fault] = fixed
        elif ev.action == ACTION_STOP:
            inherited = active.pop(ev.fault, True)
            fixed = inherited if fixed is None else fixed and inherited
        elif ev.action == ACTION_HEAL:
            ended = [active.pop(k) for k in list(active) if ev.fault is None or k == ev.fault]
            fixed = all(ended) and fixed is not False
        nodes = affected_nodes(ev.value)
        out.append(FaultStep(f=ev.f, action=ev.action, fault=ev.fault,
                             nodes=None if nodes is None else tuple(sorted(nodes)),
                             at_s=round((ev.invoke_time - origin) / 1e9, 3), target=label, fixed=bool(fixed),
                             gap_s=gap_s))
    return out


def failing_types(results: dict[str, Any] | None) -> list[str]:
    """Anomaly types with a count above zero that are not allowed, sorted."""
    return sorted({a.type for a in anomaly_rows(results if isinstance(results, dict) else None) if a.failing})


@dataclass
class RunSummary:
    """What one run did, as far as the comparison cares."""

    run_dir: Path | None
    faults: list[FaultStep] | None       # None: no readable history
    anomaly_types: list[str]
    verdict: str
    digest: str | None = None            # the planned-schedule digest its config.json stores
    problem: str | None = None           # why faults is None
    time_limit_s: float | None = None    # the workload's length: later fault ops are the final heals
    ran_on: dict[str, Any] | None = None  # the software it ran on (harness/provenance.py)

    @classmethod
    def of(cls, ops: Iterable[Op], results: dict[str, Any] | None, run_dir: Path | None = None,
           digest: str | None = None, time_limit_s: float | None = None) -> "RunSummary":
        return cls(run_dir, executed_faults(ops), failing_types(results), verdict_of(results), digest,
                   time_limit_s=time_limit_s)


def load_run(run_dir: Path) -> RunSummary:
    run_dir = Path(run_dir)
    try:
        results = json.loads((run_dir / "results.json").read_text(errors="replace"))
        results = results if isinstance(results, dict) else None
    except (OSError, ValueError):
        results = None
    try:
        cfg = json.loads((run_dir / "config.json").read_text(errors="replace"))
        cfg = cfg if isinstance(cfg, dict) else {}
    except (OSError, ValueError):
        cfg = {}
    digest = cfg.get("schedule_digest")
    # The final heals come after the workload: its real length where recorded (harness/fault_pacing.py).
    limit = cfg.get("workload_seconds", cfg.get("time_limit"))
    limit = float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) else None
    try:
        faults, problem = executed_faults(read_history(run_dir / "history.jsonl")), None
    except (OSError, HistoryFormatError) as exc:
        faults, problem = None, f"no readable history: {exc}"
    return RunSummary(run_dir, faults, failing_types(results), verdict_of(results), digest, problem, limit,
                      cfg.get("ran_on") if isinstance(cfg.get("ran_on"), dict) else None)


def prepare_rerun(cfg: Any, run_dir: Path, store: str | None) -> RunSummary:
    """Ready ``cfg`` to run a stored run again (reproduce, replay): its store (the original's
    unless given), no kept cluster, validated; the original's summary. UsageError when the
    config is bad or the original has no readable history."""
    cfg.store = store or str(run_dir.parent.parent)
    cfg.keep_cluster = False
    run_config.validate(cfg)
    original = load_run(run_dir)
    if original.faults is None:
        raise UsageError(f"{run_dir}: {original.problem}")
    return original


@dataclass
class StepRow:
    """A row of the side-by-side fault table: a pair of aligned steps (one side
    None for a step only one run executed), what differs and what is only noted."""

    original: FaultStep | None
    reproduction: FaultStep | None
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    original: RunSummary
    reproduction: RunSummary
    rows: list[StepRow]
    time_tolerance_s: float

    @property
    def same_faults(self) -> bool:
        return (self.original.faults is not None and self.reproduction.faults is not None
                and not any(r.mismatches for r in self.rows))

    @property
    def same_types(self) -> bool:
        return self.original.anomaly_types == self.reproduction.anomaly_types

    @property
    def same_verdict(self) -> bool:
        return self.original.verdict == self.reproduction.verdict

    @property
    def matches(self) -> bool:
        """Did everything match: every executed step, every anomaly type, the verdict."""
        return self.same_faults and self.same_types and self.same_verdict

    @property
    def failure_came_back(self) -> bool | None:
        """Did the original's failure come back: the same non-valid verdict with every
        anomaly type that failed the original among the reproduction's (more types
        do not make it another failure). None when the original did not fail."""
        if self.original.verdict == VALID:
            return None
        return (self.reproduction.verdict == self.original.verdict
                and set(self.original.anomaly_types) <= set(self.reproduction.anomaly_types))

    def software_differences(self) -> list[str]:
        """What differs in the software the two runs ran on (config.json's ran_on)."""
        return differences(self.original.ran_on, self.reproduction.ran_on)

    def differences(self) -> list[str]:
        """Every mismatch, one line each."""
        out = []
        for run, s in (("original", self.original), ("reproduction", self.reproduction)):
            if s.faults is None:
                out.append(f"{run}: {s.problem or 'no readable history'}")
        a, b = self.original.faults or [], self.reproduction.faults or []
        if self.original.faults is not None and self.reproduction.faults is not None and len(a) != len(b):
            out.append(f"fault steps: {len(a)} executed in the original, {len(b)} in the reproduction")
        for i, r in enumerate(self.rows, start=1):
            out += [f"fault step {i}: {m}" for m in r.mismatches]
        if not self.same_types:
            out.append(f"anomaly types: original {', '.join(self.original.anomaly_types) or 'none'}, "
                       f"reproduction {', '.join(self.reproduction.anomaly_types) or 'none'}")
        if not self.same_verdict:
            out.append(f"verdict: original {self.original.verdict}, reproduction {self.reproduction.verdict}")
        return out


def _pair(a: FaultStep, b: FaultStep, tolerance_s: float, final_after_s: float | None) -> StepRow:
    row = StepRow(a, b)
    for what, x, y in (("op", a.f, b.f), ("action", a.action, b.action), ("fault kind", a.fault, b.fault),
                       ("planned target", a.target or "-", b.target or "-")):
        if x != y:
            row.mismatches.append(f"{what} {x} != {y}")
    if a.nodes != b.nodes:
        nodes = f"nodes {','.join(a.nodes or ['-'])} != {','.join(b.nodes or ['-'])}"
        if a.fixed and b.fixed:
            row.mismatches.append(nodes)
        else:
            row.notes.append(nodes + " (run-time target: not a mismatch)")
    final = final_after_s is not None and a.at_s >= final_after_s and b.at_s >= final_after_s
    if final:
        if abs(a.at_s - b.at_s) > tolerance_s:
            row.notes.append(f"time {a.at_s:.1f}s vs {b.at_s:.1f}s: a final-phase heal, its time is not compared")
    elif a.gap_s is not None and b.gap_s is not None and abs(a.gap_s - b.gap_s) > tolerance_s:
        row.mismatches.append(f"gap after the previous step {a.gap_s:.1f}s vs {b.gap_s:.1f}s "
                              f"(more than {tolerance_s:g}s apart)")
    return row


def compare_faults(original: list[FaultStep], reproduction: list[FaultStep],
                   tolerance_s: float = DEFAULT_TIME_TOLERANCE_S,
                   final_after_s: float | None = None) -> list[StepRow]:
    """Align two fault sequences on (f, action, fault kind, planned target) and compare each pair;
    a step only one side executed is a row of its own, a mismatch."""
    matcher = difflib.SequenceMatcher(None, [s.key for s in original], [s.key for s in reproduction],
                                      autojunk=False)
    rows: list[StepRow] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        left, right = original[i1:i2], reproduction[j1:j2]
        for k in range(max(len(left), len(right))):
            a = left[k] if k < len(left) else None
            b = right[k] if k < len(right) else None
            if a is not None and b is not None:
                rows.append(_pair(a, b, tolerance_s, final_after_s))
            elif a is not None:
                rows.append(StepRow(a, None, [f"missing in the reproduction: {a.describe().strip()}"]))
            else:
                rows.append(StepRow(None, b, [f"not in the original: {b.describe().strip()}"]))
    return rows


def compare(original: RunSummary, reproduction: RunSummary,
            tolerance_s: float = DEFAULT_TIME_TOLERANCE_S) -> Comparison:
    rows = compare_faults(original.faults or [], reproduction.faults or [], tolerance_s, original.time_limit_s)
    return Comparison(original, reproduction, rows, tolerance_s)


def render(cmp: Comparison, console, title: str) -> None:
    """The side-by-side tables (fault steps, then the outcome) and the differences."""
    def mark(ok: bool, noted: bool = False) -> Text:
        return Text("ok", style="green") if ok and not noted else \
            Text("~", style="yellow") if ok else Text("DIFF", style="bold red")

    software = cmp.software_differences()
    for line in software:
        console.print(Text(f"{title}: software differs: {line}", style="yellow"), soft_wrap=True)
    if not software:
        console.print(Text(f"{title}: same software (kchaos commit, packages, JDK, Kafka jars, node image)"),
                      soft_wrap=True)

    steps = Table(title=Text(f"{title}: fault sequence as executed "
                             f"(times since workload start; each step's gap after the previous one compared, tolerance "
                             f"{cmp.time_tolerance_s:g}s)"),
                  title_justify="left")
    for col in ("#", "original", "reproduction", ""):
        steps.add_column(col, overflow="fold", justify="right" if col == "#" else "left")
    for i, r in enumerate(cmp.rows, start=1):
        steps.add_row(str(i), Text(r.original.describe().strip() if r.original else "—"),
                      Text(r.reproduction.describe().strip() if r.reproduction else "—"),
                      mark(not r.mismatches, bool(r.notes)))
    if not cmp.rows:
        steps.add_row("", "no fault executed", "no fault executed", mark(True))
    console.print(steps)

    o, n = cmp.original, cmp.reproduction
    summary = Table(title=Text(f"{title}: outcome"), title_justify="left")
    for col in ("", "original", "reproduction", ""):
        summary.add_column(col, overflow="fold")
    summary.add_row("fault steps", "-" if o.faults is None else str(len(o.faults)),
                    "-" if n.faults is None else str(len(n.faults)), mark(cmp.same_faults))
    summary.add_row("anomaly types", ", ".join(o.anomaly_types) or "none", ", ".join(n.anomaly_types) or "none",
                    mark(cmp.same_types))
    summary.add_row("verdict", o.verdict, n.verdict, mark(cmp.same_verdict))
    summary.add_row("planned-schedule digest (config only)", o.digest or "not stored", n.digest or "not stored",
                    mark(o.digest == n.digest) if o.digest and n.digest else Text("-"))
    console.print(summary)
    for r_i, r in enumerate(cmp.rows, start=1):
        for note in r.notes:
            console.print(Text(f"note: fault step {r_i}: {note}", style="yellow"), soft_wrap=True)
    for line in cmp.differences():
        console.print(Text(f"DIFFERENT {line}", style="bold red"), soft_wrap=True)
