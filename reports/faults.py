"""Fault intervals derived from the nemesis ops of a history (``Digest.nemesis``).

Which ops start, stop or heal a fault, and when a fault ends, is the history
contract's (``history.ops.FaultTracker``); here its intervals become one
band per kind for the plots. A nemesis value may carry ``color``: it wins over
the built-in palette.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from history.fault_intervals import FaultInterval, fault_intervals

from .digest import Digest

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
        # matplotlib (~0.2 s) loads only for a colour that is not #hex: most reports never need it
        from matplotlib.colors import to_hex
        return to_hex(c, keep_alpha=False)
    except (ValueError, TypeError):
        return None


def default_color(kind: str) -> str:
    if kind in PALETTE:
        return PALETTE[kind]
    return _EXTRA[zlib.crc32(kind.encode("utf-8")) % len(_EXTRA)]


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


def _secs(ns: Any) -> float:
    return float(ns) / 1e9 if isinstance(ns, (int, float)) and not isinstance(ns, bool) else 0.0


def _bands(intervals: list[FaultInterval], end: float, colors: dict[str, str]) -> list[Interval]:
    """The contract's intervals merged per kind into bands: a band spans while
    any fault of its kind is in effect."""
    out: list[Interval] = []
    current: dict[str, Interval] = {}
    for iv in sorted(intervals, key=lambda iv: iv.start_time):
        start = _secs(iv.start_time)
        stop = end if iv.end_time is None else max(_secs(iv.end_time), 0.0)
        nodes = set(iv.nodes or ())
        band = current.get(iv.fault)
        if band is not None and start <= band.end:
            band.end = max(band.end, stop)
            band.nodes = sorted(set(band.nodes) | nodes)
            band.open_at_end = band.open_at_end or iv.end_time is None
            continue
        band = Interval(kind=iv.fault, start=start, end=stop,
                        color=colors.get(iv.fault) or default_color(iv.fault),
                        nodes=sorted(nodes), open_at_end=iv.end_time is None)
        current[iv.fault] = band
        out.append(band)
    return out


def fault_timeline(d: Digest) -> FaultTimeline:
    """Bands and events from the history's nemesis ops (``Digest.nemesis``),
    read as ``history.ops`` defines them; an open fault ends with the history."""
    tl = FaultTimeline()
    for ev in d.nemesis:
        color = safe_color(ev.value.get("color")) if isinstance(ev.value, dict) else None
        if ev.fault is not None and color is not None:
            tl.colors.setdefault(ev.fault, color)
        tl.events.append(NemesisEvent(time=_secs(ev.invoke_time), end=None if ev.time is None else _secs(ev.time),
                                      index=ev.index, f=ev.f, value=ev.value, error=ev.error,
                                      action=ev.action, kind=ev.fault, color=color))
    tl.intervals = _bands(fault_intervals(d.nemesis), d.duration, tl.colors)
    tl.intervals.sort(key=lambda iv: (iv.start, iv.kind))
    for ev in tl.events:
        if ev.kind and not ev.color:
            ev.color = tl.colors.get(ev.kind) or default_color(ev.kind)
    for iv in tl.intervals:
        tl.colors.setdefault(iv.kind, iv.color)
    return tl
