"""Two Jepsen views of how soon acknowledged writes become visible to readers:

* **unseen over time**: at each time t, the acknowledged writes (acked by t)
  that no poll had returned by t, per partition and in total (Jepsen's
  "unseen" plot). A write whose value was read before its ack arrived counts
  from its ack on, as seen.
* **real-time lag**: for each non-drain ok poll and partition it read, how long
  before the poll's invocation an acknowledged write of that partition at an
  offset above the poll's last record of it existed (0 if none), as in
  ``checkers.reference_stats.stats`` ("realtime_lag").

Both use only the history digest (``Digest.acks`` with their first reads,
``Digest.positions``: every op of the history, thinned only where points are
drawn), with the fault bands behind them and the x axis from the workload's
start like every other plot.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .digest import Digest
from .faults import FaultTimeline
from .figure import MAX_POINTS, WIDTH_IN, Plot, downsample, fault_handles, legend, png, shade, time_axis

MAX_LINES = 8            # partitions drawn as their own line (the total is always drawn)
GRID = 1500              # points of the unseen step line
PART_COLORS = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c2255c", "#5c940d")


def _order(parts: list[Any]) -> list[Any]:
    return sorted(parts, key=lambda p: (not isinstance(p, int), p if isinstance(p, int) else str(p)))


def unseen_series(d: Digest, xs: np.ndarray) -> dict[Any, np.ndarray]:
    """{partition: unseen count at each x} (x in seconds since the workload started)."""
    out = {}
    for p, a in d.acks.items():
        read = ~np.isnan(a.seen)
        acked = np.sort(a.t) - d.origin
        seen = np.sort(np.maximum(a.t[read], a.seen[read])) - d.origin
        out[p] = np.searchsorted(acked, xs, side="right") - np.searchsorted(seen, xs, side="right")
    return out


def unseen_plot(d: Digest, tl: FaultTimeline) -> Plot:
    title = "Unseen acknowledged writes over time"
    caption = ("At each time t: the number of acknowledged sends (acked by t) whose value no poll, drain "
               "included, had returned by t; the total (black) and per partition (coloured). "
               "Shaded bands are fault intervals.")
    if not d.acks:
        return Plot("unseen", title, caption, None, "No acknowledged sends in the history.")
    hi = max(d.span, 1e-3)
    xs = np.linspace(0.0, hi, GRID)
    series = unseen_series(d, xs)
    parts = _order(list(series))
    shown = sorted(parts, key=lambda p: -int(series[p].max()))[:MAX_LINES]
    if len(parts) > len(shown):
        caption += f" Showing {len(shown)} of {len(parts)} partitions (those with the most unseen)."
    fig = Figure(figsize=(WIDTH_IN, 3.0))
    ax = fig.add_subplot()
    handles = []
    total = sum(series.values())
    line, = ax.plot(xs, total, color="#212529", lw=1.6, drawstyle="steps-post", zorder=3,
                    label=f"total (max {int(total.max())})")
    handles.append(line)
    if len(parts) > 1:
        for i, p in enumerate(_order(shown)):
            line, = ax.plot(xs, series[p], color=PART_COLORS[i % len(PART_COLORS)], lw=1.0, alpha=0.85,
                            drawstyle="steps-post", zorder=2, label=f"p{p} (max {int(series[p].max())})")
            handles.append(line)
    shade(ax, tl, d.origin)
    ax.set_ylabel("unseen writes")
    ax.set_ylim(0, max(1.0, float(total.max()) * 1.08))
    axis = time_axis([ax], d)
    rows = legend(ax, handles + fault_handles(tl), ncol=8)
    return Plot("unseen", title, caption, png(fig, rows), **axis)


def lag_points(d: Digest) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """{partition: (poll invoke times s since the workload started, lag s)}."""
    out = {}
    for p, (t, last) in d.positions.items():
        a = d.acks.get(p)
        lag = np.zeros(len(t))
        if a is not None and len(a):
            # each acknowledged offset's first ack, and the earliest ack of any offset >= it
            order = np.argsort(a.offset, kind="stable")
            offs = a.offset[order]
            starts = np.flatnonzero(np.r_[True, offs[1:] != offs[:-1]])
            first = np.minimum.reduceat(a.t[order], starts)
            offs, mins = offs[starts], np.minimum.accumulate(first[::-1])[::-1]
            k = np.searchsorted(offs, last, side="right")
            has = k < len(offs)
            lag[has] = np.maximum(0.0, t[has] - mins[k[has]])
        out[p] = (t - d.origin, lag)
    return out


def lag_plot(d: Digest, tl: FaultTimeline) -> Plot:
    title = "Real-time lag of reads"
    caption = ("One point per non-drain ok poll and partition it read (x: the poll's invocation): how many "
               "seconds before that invocation a send to the partition at an offset above the poll's last "
               f"record of it had been acknowledged (0 when none had); downsampled to {MAX_POINTS} points per "
               "partition. Shaded bands are fault intervals.")
    pts = lag_points(d) if d.positions else {}
    if not pts:
        return Plot("lag", title, caption, None, "No non-drain poll read any record.")
    parts = _order(list(pts))
    shown = parts[:MAX_LINES]
    if len(parts) > len(shown):
        caption += f" Showing {len(shown)} of {len(parts)} partitions."
    fig = Figure(figsize=(WIDTH_IN, 3.0))
    ax = fig.add_subplot()
    handles = []
    for i, p in enumerate(shown):
        x, y = pts[p]
        pick = downsample(len(x), seed=i)
        color = PART_COLORS[i % len(PART_COLORS)]
        ax.scatter(x[pick], y[pick], s=6, color=color, alpha=0.6, lw=0, rasterized=True, zorder=2)
        handles.append(Line2D([], [], marker="o", ls="", color=color,
                              label=f"p{p} (max {float(y.max()):.1f} s)" if len(y) else f"p{p}"))
    shade(ax, tl, d.origin)
    ax.set_ylabel("lag (s)")
    ax.set_ylim(0, max(0.1, max(float(pts[p][1].max()) for p in shown) * 1.08))
    axis = time_axis([ax], d)
    rows = legend(ax, handles + fault_handles(tl), ncol=8)
    return Plot("lag", title, caption, png(fig, rows), **axis)


__all__ = ["unseen_plot", "lag_plot", "unseen_series", "lag_points"]
