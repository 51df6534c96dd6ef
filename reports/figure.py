"""Drawing helpers the report's plots share: the Plot record, the time axis
measured from the workload's start, fault shading, legends and PNG output."""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .digest import Digest
from .faults import FaultTimeline


OUTCOME_COLORS = {"ok": "#2f9e44", "fail": "#e03131", "info": "#f59f00"}
PCT_COLORS = {50: "#1c7ed6", 95: "#7048e8", 99: "#c2255c"}
MAX_POINTS = 4000        # per outcome / per partition
MAX_BINS = 600
MAX_PARTITIONS = 8
WIDTH_IN = 12.4
DPI = 96
MARKER = "kchaos-marker"   # gid of lines that mark a time (elections), not data
XLABEL = "time since the workload started (s)"

RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": DPI,
}


@dataclass
class Plot:
    id: str
    title: str
    caption: str
    uri: str | None          # data:image/png;base64,...
    note: str | None = None  # why there is no image
    # the x axis as drawn, in seconds since the workload started, and the x of
    # the first data point drawn inside it (None when there is no image)
    x_min: float | None = None
    x_max: float | None = None
    first_x: float | None = None
    origin: float = 0.0      # the axis's 0, in seconds since the harness started


def visible_first(x: np.ndarray, lo: float, hi: float, joined: bool) -> float | None:
    """The smallest x of ``x`` drawn inside [lo, hi]; a joined line or polygon
    that crosses ``lo`` is drawn from ``lo``."""
    x = x[np.isfinite(x)]
    if not len(x):
        return None
    inside = x[(x >= lo) & (x <= hi)]
    if joined and (x < lo).any() and (x >= lo).any():
        return lo
    return float(inside.min()) if len(inside) else None


def first_x(axes: list[Any], lo: float, hi: float) -> float | None:
    """The first data point's x over ``axes``, from what matplotlib drew: lines
    (not time markers), scatter offsets and bar polygons; fault bands are not data."""
    found: list[float] = []
    for ax in axes:
        for line in ax.lines:
            if line.get_gid() == MARKER:
                continue
            x = np.asarray(line.get_xdata(), float)
            y = np.asarray(line.get_ydata(), float)
            ok = np.isfinite(y)
            # a NaN y breaks the line: each finite run is drawn on its own
            if ok.any():
                v = visible_first(np.where(ok, x, np.nan), lo, hi, joined=True)
                if v is not None:
                    found.append(v)
        for c in ax.collections:
            if c.get_gid() == MARKER:
                continue
            if isinstance(c, PathCollection):
                offs = np.asarray(c.get_offsets(), float).reshape(-1, 2)
                v = visible_first(offs[:, 0], lo, hi, joined=False)
                if v is not None:
                    found.append(v)
            else:
                for path in c.get_paths():
                    v = visible_first(np.asarray(path.vertices, float)[:, 0], lo, hi, joined=True)
                    if v is not None:
                        found.append(v)
    return min(found) if found else None


def time_axis(axes: list[Any], d: Digest, origin: float | None = None, end: float | None = None) -> dict[str, Any]:
    """Set the shared x axis to [0, end of history] in seconds since the
    workload started; the Plot fields that describe it."""
    origin = d.origin if origin is None else origin
    hi = max(d.duration, end or 0.0) - origin
    if hi <= 0:
        hi = 1.0
    for ax in axes:
        ax.set_xlim(0.0, hi)
    lo, hi = axes[0].get_xlim()
    axes[-1].set_xlabel(XLABEL)
    return {"x_min": float(lo), "x_max": float(hi), "first_x": first_x(axes, lo, hi), "origin": origin}


# Margins in inches, the same for every plot (a fixed layout: matplotlib's
# constrained layout measured every label at each save, about 40% of the plots'
# CPU time). Left: the y label and tick labels up to six digits.
LEFT_IN, RIGHT_IN, BOTTOM_IN, TOP_IN = 0.85, 0.2, 0.5, 0.1
LEGEND_ROW_IN = 0.22       # a legend row above the first panel (legend fontsize 8)
PANEL_GAP_IN = 0.15        # between panels sharing the x axis


def fixed_layout(fig: Figure, legend_rows: int) -> None:
    """Place the figure's panels (stacked, sharing x) inside fixed margins, with
    ``legend_rows`` rows of legend above the first."""
    w, h = fig.get_size_inches()
    n = max(1, len(fig.axes))
    top = TOP_IN + legend_rows * LEGEND_ROW_IN
    panel = max(0.3, (h - top - BOTTOM_IN - PANEL_GAP_IN * (n - 1)) / n)
    fig.subplots_adjust(left=LEFT_IN / w, right=1 - RIGHT_IN / w, bottom=BOTTOM_IN / h, top=1 - top / h,
                        hspace=PANEL_GAP_IN / panel)


def png(fig: Figure, legend_rows: int = 1) -> str:
    """The figure as a data URI, laid out by ``fixed_layout``."""
    fixed_layout(fig, legend_rows)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, pil_kwargs={"compress_level": 1})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def downsample(n: int, k: int = MAX_POINTS, seed: int = 0) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def bin_width(duration: float) -> float:
    return float(max(1, math.ceil(duration / MAX_BINS)))


def bin_percentiles(t: np.ndarray, y: np.ndarray, width: float,
                    qs: tuple[int, ...]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The centres of the ``width``-second bins of ``t`` (s, from 0) that hold
    points, and per q the q-th percentile of ``y`` in each: of every point,
    none thinned. Points come in time order (completions), so the sort by bin
    is usually skipped."""
    bins = np.maximum(t // width, 0).astype(np.int64)
    if len(bins) > 1 and not (bins[1:] >= bins[:-1]).all():
        order = np.argsort(bins, kind="stable")
        bins, y = bins[order], y[order]
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]]) if len(bins) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(bins)]
    per_bin = np.array([np.percentile(y[s:e], qs) for s, e in zip(starts, ends)]).reshape(-1, len(qs))
    return bins[starts] * width + width / 2, {q: per_bin[:, i] for i, q in enumerate(qs)}


def shade(ax, timeline: FaultTimeline, origin: float) -> None:
    """The fault intervals as bands over the axes' full height: one collection
    (not a patch per interval: a history with hundreds of faults, times eight
    panels, drew slowly), marked as not data."""
    if not timeline.intervals:
        return
    verts = []
    for iv in timeline.intervals:
        start, end = iv.start - origin, (iv.end if iv.end > iv.start else iv.start + 0.05) - origin
        verts.append([(start, 0.0), (start, 1.0), (end, 1.0), (end, 0.0)])
    ax.add_collection(PolyCollection(verts, facecolors=[iv.color for iv in timeline.intervals], alpha=0.14,
                                     linewidths=0, zorder=0, transform=ax.get_xaxis_transform(), gid=MARKER),
                      autolim=False)


def fault_handles(timeline: FaultTimeline) -> list[Any]:
    return [Patch(facecolor=timeline.colors.get(k), alpha=0.35, label=f"fault: {k}")
            for k in timeline.kinds()]


def legend(ax, handles: list[Any], ncol: int = 6) -> int:
    """The legend above ``ax``; returns its number of rows (for ``png``)."""
    if not handles:
        return 0
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=ncol,
              borderaxespad=0, handlelength=1.6)
    return math.ceil(len(handles) / ncol)
