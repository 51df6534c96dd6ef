"""Fault intervals derived from the nemesis ops of a history.

Which ops start, stop or heal a fault is ``harness.faultops.classify``. A
start opens an interval of its kind on the nodes in ``value["nodes"]``, the
matching stop closes it on those nodes, and a heal closes everything (or only
``value["fault"]``). A nemesis value may carry ``fault`` (the kind's name) and
``color``: both win over the built-in guesses. An interval still open at the
end of the history ends with it.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

from harness.faultops import classify
from harness.history import INVOKE, NEMESIS, Op

# Default palette by fault kind (also used for the legend chips in the HTML).
PALETTE: dict[str, str] = {
    "partition": "#e8590c",
    "kill": "#c2255c",
    "pause": "#1971c2",
    "clock": "#2f9e44",
}
_EXTRA = ["#7048e8", "#f08c00", "#0c8599", "#66a80f", "#862e9c", "#5c7cfa", "#a61e4d", "#495057"]

_HEX = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")


def safe_color(c: Any) -> str | None:
    """A colour from the history as ``#rrggbb``, or None if it is not one.

    The result goes into CSS and matplotlib, so nothing else gets through.
    """
    if not isinstance(c, str) or not c or len(c) > 40:
        return None
    c = c.strip()
    if _HEX.match(c):
        if len(c) == 4:
            c = "#" + "".join(ch * 2 for ch in c[1:])
        return c.lower()
    try:
        from matplotlib.colors import to_hex
        return to_hex(c, keep_alpha=False)
    except (ValueError, TypeError):
        return None


def default_color(kind: str) -> str:
    if kind in PALETTE:
        return PALETTE[kind]
    return _EXTRA[zlib.crc32(kind.encode("utf-8")) % len(_EXTRA)]


def _nodes(value: Any) -> set[str]:
    nodes = value.get("nodes") if isinstance(value, dict) else None
    if isinstance(nodes, (list, tuple)):
        out = {str(n) for n in nodes if isinstance(n, (str, int))}
        return out or {"*"}
    if isinstance(nodes, (str, int)):
        return {str(nodes)}
    return {"*"}


@dataclass
class Interval:
    kind: str
    start: float  # seconds
    end: float
    color: str
    nodes: list[str]
    open_at_end: bool = False


@dataclass
class NemesisEvent:
    time: float            # seconds (invoke, or completion when there is no invoke)
    end: float | None      # completion time in seconds
    index: Any
    f: str
    value: Any
    error: Any
    action: str | None
    kind: str | None
    color: str | None


@dataclass
class FaultTimeline:
    intervals: list[Interval] = field(default_factory=list)
    events: list[NemesisEvent] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)  # kind -> colour

    def kinds(self) -> list[str]:
        seen: list[str] = []
        for iv in self.intervals:
            if iv.kind not in seen:
                seen.append(iv.kind)
        return seen

    def active_at(self, t: float) -> list[Interval]:
        return [iv for iv in self.intervals if iv.start <= t <= iv.end]


def _secs(op: Op) -> float:
    try:
        return float(op.get("time", 0)) / 1e9
    except (TypeError, ValueError):
        return 0.0


def fault_timeline(ops: Iterable[Op], end_time: float | None = None) -> FaultTimeline:
    tl = FaultTimeline()
    events: list[NemesisEvent] = []
    pending: NemesisEvent | None = None
    last_t = 0.0
    for op in ops:
        t = _secs(op)
        last_t = max(last_t, t)
        if op.get("process") != NEMESIS:
            continue
        f = str(op.get("f"))
        if op.get("type") == INVOKE:
            pending = None
        elif pending is not None and pending.f == f:
            pending.end = t
            if pending.error is None and op.get("error") is not None:
                pending.error = op.get("error")
            pending = None
            continue
        value = op.get("value")
        action, kind = classify(f, value)
        color = safe_color(value.get("color")) if isinstance(value, dict) else None
        if kind is not None and color is not None:
            tl.colors.setdefault(kind, color)
        ev = NemesisEvent(time=t, end=None if op.get("type") == INVOKE else t, index=op.get("index"),
                          f=f, value=value, error=op.get("error"), action=action, kind=kind, color=color)
        events.append(ev)
        if op.get("type") == INVOKE:
            pending = ev
    end = max(last_t, end_time or 0.0)

    open_nodes: dict[str, set[str]] = {}
    started: dict[str, float] = {}
    all_nodes: dict[str, set[str]] = {}

    def close(kind: str, t: float, at_end: bool = False) -> None:
        tl.intervals.append(Interval(kind=kind, start=started.pop(kind), end=max(t, 0.0),
                                     color=tl.colors.get(kind) or default_color(kind),
                                     nodes=sorted(all_nodes.pop(kind, set()) - {"*"}),
                                     open_at_end=at_end))
        open_nodes.pop(kind, None)

    for ev in events:
        if ev.action == "start" and ev.kind:
            nodes = _nodes(ev.value)
            if not open_nodes.get(ev.kind):
                started[ev.kind] = ev.time
                open_nodes[ev.kind] = set()
            open_nodes[ev.kind] |= nodes
            all_nodes.setdefault(ev.kind, set()).update(nodes)
        elif ev.action == "stop" and ev.kind:
            if open_nodes.get(ev.kind):
                nodes = _nodes(ev.value)
                if "*" in nodes:
                    open_nodes[ev.kind].clear()
                else:
                    open_nodes[ev.kind] -= nodes
                if open_nodes[ev.kind] <= {"*"} and "*" not in nodes and open_nodes[ev.kind]:
                    open_nodes[ev.kind].clear()  # a node-less start closed by any stop
                if not open_nodes[ev.kind]:
                    close(ev.kind, ev.time)
        elif ev.action == "heal":
            for kind in [k for k, n in open_nodes.items() if n and (ev.kind is None or k == ev.kind)]:
                close(kind, ev.time)
    for kind in [k for k, n in open_nodes.items() if n]:
        close(kind, end, at_end=True)
    for ev in events:
        if ev.kind and not ev.color:
            ev.color = tl.colors.get(ev.kind) or default_color(ev.kind)
    tl.intervals.sort(key=lambda iv: (iv.start, iv.kind))
    for iv in tl.intervals:
        tl.colors.setdefault(iv.kind, iv.color)
    tl.events = events
    return tl
