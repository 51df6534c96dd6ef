"""Faults as the history records them: which nemesis op starts, stops or heals
which kind of fault on which nodes (``fault_boundary``), and the intervals
during which each fault was in force (``FaultTracker``, ``fault_intervals``).
Readers never guess a fault from an op's name; see ops.py for the nemesis op's
fields and docs/design.md, "The history".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from .ops import ACTION_HEAL, ACTION_START, ACTION_STOP, ACTIONS, INVOKE, NEMESIS, Op

FORMAT1_STARTS = {"start-partition": "partition", "kill": "kill", "pause": "pause",
                  "bump-clock": "clock", "strobe-clock": "clock"}
FORMAT1_STOPS = {"stop-partition": "partition", "start": "kill", "restart": "kill",
                 "resume": "pause", "reset-clock": "clock"}
FORMAT1_HEALS = {"heal", "heal-all", "stop-all"}


def fault_boundary(f: Any, value: Any) -> tuple[str | None, str | None]:
    """(action, fault kind) of a nemesis op: the action is "start", "stop",
    "heal" or None (not a fault boundary); the kind is None for a heal of
    every kind. Read from ``value["action"]`` and ``value["fault"]``."""
    value = value if isinstance(value, dict) else {}
    fault = value.get("fault")
    fault = str(fault) if isinstance(fault, (str, int)) and not isinstance(fault, bool) and str(fault) else None
    if "action" in value:
        action = value["action"]
        return (action, fault) if action in ACTIONS else (None, fault)
    f = str(f)
    if f in FORMAT1_HEALS:
        return ACTION_HEAL, fault
    if f in FORMAT1_STOPS:
        return ACTION_STOP, fault or FORMAT1_STOPS[f]
    if f in FORMAT1_STARTS:
        return ACTION_START, fault or FORMAT1_STARTS[f]
    return None, fault


def affected_nodes(value: Any) -> frozenset[str] | None:
    """The nodes a nemesis value names; None when it names none (the fault is
    not tied to nodes, or the op did not say)."""
    nodes = value.get("nodes") if isinstance(value, dict) else None
    if isinstance(nodes, (list, tuple)):
        return frozenset(str(n) for n in nodes if isinstance(n, (str, int)) and not isinstance(n, bool))
    if isinstance(nodes, (str, int)) and not isinstance(nodes, bool):
        return frozenset({str(nodes)})
    return None


@dataclass
class NemesisOp:
    """A nemesis invoke and its completion, as one event."""

    index: int | None          # of the invoke (of the completion when there is no invoke)
    invoke_time: int           # ns
    time: int | None           # completion time (ns); None if it never completed
    f: str
    value: Any                 # the completion's value (the invoke's while incomplete)
    error: Any = None
    planned: Any = None        # the invoke's value: the plan's (a completion may drop its target)

    @property
    def action(self) -> str | None:
        return fault_boundary(self.f, self.value)[0]

    @property
    def fault(self) -> str | None:
        return fault_boundary(self.f, self.value)[1]

    @property
    def end_time(self) -> int:
        return self.time if self.time is not None else self.invoke_time


def nemesis_ops(ops: Iterable[Op]) -> Iterator[NemesisOp]:
    """The history's nemesis ops, each invoke paired with its completion,
    in invocation order."""
    pending: NemesisOp | None = None
    for op in ops:
        if op.get("process") != NEMESIS:
            continue
        t = op.get("time")
        t = int(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0
        f = str(op.get("f"))
        if op.get("type") != INVOKE and pending is not None and pending.f == f:
            pending.time, pending.value = t, op.get("value", pending.value)
            pending.error = op.get("error", pending.error)
            yield pending
            pending = None
            continue
        if pending is not None:
            yield pending
            pending = None
        ev = NemesisOp(index=op.get("index"), invoke_time=t, time=None if op.get("type") == INVOKE else t,
                       f=f, value=op.get("value"), error=op.get("error"),
                       planned=op.get("value") if op.get("type") == INVOKE else None)
        if op.get("type") == INVOKE:
            pending = ev
        else:
            yield ev
    if pending is not None:
        yield pending


@dataclass
class FaultInterval:
    """One start op's fault, from its invocation until the op that ended it."""

    fault: str
    start: NemesisOp
    nodes: frozenset[str] | None           # None: not tied to nodes
    end: NemesisOp | None = None
    remaining: set[str] = field(default_factory=set)

    @property
    def start_time(self) -> int:
        return self.start.invoke_time

    @property
    def end_time(self) -> int | None:
        return None if self.end is None else self.end.end_time


class FaultTracker:
    """Fault intervals as nemesis ops arrive: the one reading of which faults
    are in effect, shared by the checkers, the reports and the runner.

    A start opens an interval on the nodes its completion names (a start that
    names an empty list of nodes did nothing and opens none). A stop of a kind
    ends, in every open interval of that kind, the nodes it names; an interval
    ends when none of its nodes is left, and a stop that names no nodes (or an
    interval tied to no nodes) ends them all. A heal ends every open interval,
    or those of its kind.
    """

    def __init__(self) -> None:
        self.intervals: list[FaultInterval] = []
        self.open: list[FaultInterval] = []

    def add(self, ev: NemesisOp) -> None:
        if ev.action == ACTION_START and ev.fault:
            nodes = affected_nodes(ev.value)
            if nodes is not None and not nodes:
                return
            iv = FaultInterval(ev.fault, ev, nodes, remaining=set(nodes or ()))
            self.intervals.append(iv)
            self.open.append(iv)
        elif ev.action == ACTION_STOP and ev.fault:
            named = affected_nodes(ev.value)
            for iv in [iv for iv in self.open if iv.fault == ev.fault]:
                if named is None or iv.nodes is None:
                    iv.remaining.clear()
                else:
                    iv.remaining -= named
                if not iv.remaining:
                    self._close(iv, ev)
        elif ev.action == ACTION_HEAL:
            for iv in [iv for iv in self.open if ev.fault is None or iv.fault == ev.fault]:
                self._close(iv, ev)

    def _close(self, iv: FaultInterval, ev: NemesisOp) -> None:
        iv.end = ev
        self.open.remove(iv)

    def active_kinds(self) -> list[str]:
        return list(dict.fromkeys(iv.fault for iv in self.open))


def fault_intervals(events: Iterable[NemesisOp]) -> list[FaultInterval]:
    """Every fault interval of a run, in start order; open ones have no end."""
    tracker = FaultTracker()
    for ev in events:
        tracker.add(ev)
    return tracker.intervals
