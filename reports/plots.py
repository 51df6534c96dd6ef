"""Matplotlib plots (Agg canvas, no pyplot state) as inline ``data:image/png`` URIs.

Every plot shades the fault intervals in the fault kind's colour. Every
count, bin and percentile is of every op of the history (``reports.digest``);
only point clouds are thinned, deterministically, to MAX_POINTS per outcome
or partition, so a 10M-op history draws as fast as a small one.

Time axes start at the workload's start (the first client op, ``Digest.origin``),
not at the harness's: every time is drawn as seconds since the workload
started, and the x axis spans [0, end of history]. The set-up before it (which
can take minutes) is named in the captions rather than drawn as empty space.
Each Plot carries the x range and the first drawn data point's x, read back
from the artists matplotlib drew, so the HTML and the tests can check where
the data starts.
"""
from __future__ import annotations

import logging
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from checkers.elections import Sample, unclean_elections
from history.ops import HistoryFormatError
from history.op_values import sample_view

from .digest import TYPES, Digest, as_partition
from .faults import FaultTimeline
from .visibility import lag_plot, unseen_plot
from .figure import (MARKER, MAX_PARTITIONS, MAX_POINTS, OUTCOME_COLORS, PCT_COLORS, RC, WIDTH_IN, Plot,
                     bin_percentiles, bin_width, downsample, fault_handles, legend, png, shade, time_axis)

log = logging.getLogger(__name__)

def throughput_plot(d: Digest, tl: FaultTimeline, availability: list[dict[str, Any]] | None) -> Plot:
    title = "Throughput by outcome"
    origin, end = d.origin, None
    width = bin_width(d.span)
    caption = (f"Completed client operations per second ({width:g} s bins) by outcome; "
               "shaded bands are fault intervals.")
    fig = Figure(figsize=(WIDTH_IN, 3.0))
    ax = fig.add_subplot()
    handles = []
    if d.completions:
        nb = int(d.span // width) + 1
        x = np.arange(nb) * width + width / 2
        bins = np.clip((d.comp_t - origin) // width, 0, nb - 1).astype(np.int64)
        per_type = np.bincount(bins * 3 + d.comp_type, minlength=3 * nb).reshape(nb, 3)
        for code, typ in enumerate(TYPES):
            line, = ax.plot(x, per_type[:, code] / width, color=OUTCOME_COLORS[typ], lw=1.3, drawstyle="steps-mid",
                            label=f"{typ} ({int(per_type[:, code].sum())})")
            handles.append(line)
    elif availability:
        caption = "Operations per second from results.json (the history is empty); shaded bands are faults."
        secs = np.array([float(a.get("second", i)) for i, a in enumerate(availability)])
        busy = [s for s, a in zip(secs, availability)
                if any(float(a.get(k, 0) or 0) for k in ("ok", "fail", "info"))]
        origin = min(busy) if busy else (float(secs.min()) if len(secs) else 0.0)
        end = float(secs.max()) + 1.0 if len(secs) else None
        secs = secs - origin
        for typ in ("ok", "fail", "info"):
            y = np.array([float(a.get(typ, 0) or 0) for a in availability])
            line, = ax.plot(secs, y, color=OUTCOME_COLORS[typ], lw=1.3, drawstyle="steps-mid", label=typ)
            handles.append(line)
    else:
        return Plot("throughput", title, caption, None, "No client operations in the history.")
    shade(ax, tl, origin)
    ax.set_ylabel("ops / s")
    ax.set_ylim(bottom=0)
    axis = time_axis([ax], d, origin, end)
    rows = legend(ax, handles + fault_handles(tl), ncol=8)
    return Plot("throughput", title, caption, png(fig, rows), **axis)


def latency_plot(d: Digest, tl: FaultTimeline) -> Plot:
    title = "Latency"
    width = bin_width(d.span)
    caption = (f"Each completed client operation's latency (points, downsampled to {MAX_POINTS} per outcome), "
               f"with p50/p95/p99 of all completions per {width:g} s; log scale.")
    if not len(d.lat_t):
        return Plot("latency", title, caption, None, "No completed client operations in the history.")
    t = d.lat_t - d.origin
    lat = np.maximum(d.lat_ms, 1e-3)
    fig = Figure(figsize=(WIDTH_IN, 3.4))
    ax = fig.add_subplot()
    handles = []
    for code, typ in enumerate(TYPES):
        idx = np.flatnonzero(d.lat_type == code)
        if not len(idx):
            continue
        pick = idx[downsample(len(idx), seed=code)]
        ax.scatter(t[pick], lat[pick], s=4 if typ == "ok" else 9, color=OUTCOME_COLORS[typ],
                   alpha=0.35 if typ == "ok" else 0.7, lw=0, rasterized=True, zorder=2)
        handles.append(Line2D([], [], marker="o", ls="", color=OUTCOME_COLORS[typ], label=f"{typ} ({len(idx)})"))
    x, pct = bin_percentiles(t, lat, width, (50, 95, 99))
    for q, y in pct.items():
        line, = ax.plot(x, y, color=PCT_COLORS[q], lw=1.2, label=f"p{q}", zorder=3)
        handles.append(line)
    shade(ax, tl, d.origin)
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms)")
    axis = time_axis([ax], d)
    rows = legend(ax, handles + fault_handles(tl), ncol=8)
    return Plot("latency", title, caption, png(fig, rows), **axis)


def _witness_points(w: dict[str, Any], d: Digest) -> list[tuple[float, float]]:
    p = as_partition(w.get("partition"))
    offs = [o for o in (w.get("offsets") or []) if isinstance(o, (int, float)) and not isinstance(o, bool)]
    vals = list(w.get("values") or [])
    ops = [o for o in (w.get("ops") or []) if isinstance(o, dict)]
    fallback = None
    for o in ops:
        if isinstance(o.get("time"), (int, float)) and o.get("type") != "invoke":
            fallback = o["time"] / 1e9
            break

    def when(v: Any) -> float | None:
        try:
            t = d.ack_time.get((p, v))
        except TypeError:
            t = None
        return t if t is not None else fallback

    pts = []
    if offs and len(offs) == len(vals):
        pairs = list(zip(offs, vals))
    elif len(offs) == 1 and vals:
        pairs = [(offs[0], v) for v in vals]
    else:
        pairs = [(o, None) for o in offs]
    for off, v in pairs:
        t = when(v) if v is not None else fallback
        if t is not None:
            pts.append((t, float(off)))
    return pts


def offsets_plot(d: Digest, tl: FaultTimeline, anomalies: dict[str, list[dict[str, Any]]],
                 elections: list[dict[str, Any]]) -> Plot:
    title = "Acknowledged offsets per partition"
    marks = {"lost-write": ("x", "#e03131", 46), "inconsistent-offset": ("D", "#7048e8", 30)}
    wit_parts: list[Any] = []
    for typ in marks:
        for w in anomalies.get(typ, []):
            p = as_partition(w.get("partition"))
            if p not in wit_parts:
                wit_parts.append(p)
    parts = [p for p in wit_parts if p in d.acks] + [p for p in d.sorted_partitions() if p not in wit_parts]
    shown = parts[:MAX_PARTITIONS]
    caption = ("Offset of every acknowledged send over time (downsampled), one panel per partition; "
               "lost-write (×) and inconsistent-offset (◆) witnesses highlighted, unclean elections dashed.")
    if len(parts) > len(shown):
        caption += f" Showing {len(shown)} of {len(parts)} partitions (those with witnesses first)."
    if not shown:
        return Plot("offsets", title, caption, None, "No acknowledged sends in the history.")
    fig = Figure(figsize=(WIDTH_IN, 1.2 + 1.9 * len(shown)))
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    used: dict[str, Any] = {}
    for i, (ax, p) in enumerate(zip(axes, shown)):
        a = d.acks[p]
        pick = downsample(len(a), seed=i)
        ax.scatter(a.t[pick] - d.origin, a.offset[pick].astype(float), s=4, color="#495057", alpha=0.55, lw=0,
                   rasterized=True, zorder=2)
        used.setdefault("ack", Line2D([], [], marker="o", ls="", color="#495057",
                                      label="acknowledged send"))
        for typ, (marker, color, size) in marks.items():
            xs, ys = [], []
            for w in anomalies.get(typ, []):
                if as_partition(w.get("partition")) == p:
                    for t, off in _witness_points(w, d):
                        xs.append(t - d.origin)
                        ys.append(off)
            if xs:
                ax.scatter(xs, ys, marker=marker, s=size, color=color, lw=1.4 if marker == "x" else 0.5,
                           edgecolors="white" if marker != "x" else None, zorder=4)
                used.setdefault(typ, Line2D([], [], marker=marker, ls="", color=color, label=typ))
        for e in elections:
            if as_partition(e.get("partition")) == p and isinstance(e.get("time"), (int, float)):
                ax.axvline(e["time"] / 1e9 - d.origin, color="#c92a2a", ls="--", lw=1.2, zorder=3, gid=MARKER)
                used.setdefault("ue", Line2D([], [], color="#c92a2a", ls="--", label="unclean election"))
        shade(ax, tl, d.origin)
        ax.set_ylabel(f"p{p} offset")
    axis = time_axis(list(axes), d)
    rows = legend(axes[0], list(used.values()) + fault_handles(tl), ncol=8)
    return Plot("offsets", title, caption, png(fig, rows), **axis)


def _derive_elections(samples: list[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Unclean elections computed from the samples (only used when
    results.json does not say), as the checkers compute them."""
    rows = []
    for i, (t, v) in enumerate(samples):
        try:
            view, _ = sample_view(v, f"sample {i}")
        except HistoryFormatError:
            continue
        rows.append(Sample(i, i, int(t * 1e9), view))
    return unclean_elections(rows)


# clean elections from results.json's election list, drawn as small markers (unclean ones are stars)
CLEAN_KINDS = {"elr": ("D", "#f08c00", "ELR election (clean, KIP-966)"), "isr": ("o", "#2f9e44", "election from ISR"),
               "last-leader": ("s", "#862e9c", "last known leader re-elected (ISR and ELR empty)")}


def leaders_plot(d: Digest, tl: FaultTimeline, elections: list[dict[str, Any]], derived: bool,
                 clean: list[dict[str, Any]] | None = None) -> Plot:
    title = "Leader and ISR per partition"
    caption = ("From the metadata samples: bars show each broker's ISR membership, the dark line the "
               "partition leader; red stars mark unclean elections"
               + (" (derived from the samples: results.json is missing)" if derived else "")
               + ("; orange diamonds ELR elections, green dots elections from the ISR, purple squares the last "
                  "known leader re-elected" if clean else "") + ".")
    clean = [e for e in (clean or []) if isinstance(e.get("kind"), str) and e["kind"] in CLEAN_KINDS]
    if not d.samples:
        return Plot("leaders", title, caption, None, "No metadata samples (f \"sample\") in the history.")
    series: dict[Any, list[tuple[float, Any, list[Any]]]] = {}
    for t, s in d.samples:
        parts = s.get("partitions")
        if not isinstance(parts, dict):
            continue
        for p, st in parts.items():
            if isinstance(st, dict):
                isr = st.get("isr") if isinstance(st.get("isr"), list) else []
                leader = st.get("leader")
                series.setdefault(as_partition(p), []).append(
                    (t - d.origin, leader if isinstance(leader, (int, float)) else None,
                     [b for b in isr if isinstance(b, (int, float)) and not isinstance(b, bool)]))
    el_parts = [as_partition(e.get("partition")) for e in elections]
    parts = [p for p in dict.fromkeys(el_parts) if p in series] + \
            [p for p in sorted(series, key=lambda p: (not isinstance(p, int), str(p))) if p not in el_parts]
    shown = parts[:MAX_PARTITIONS]
    if len(parts) > len(shown):
        caption += f" Showing {len(shown)} of {len(parts)} partitions (those with unclean elections first)."
    if not shown:
        return Plot("leaders", title, caption, None, "The metadata samples name no partitions.")
    brokers = sorted({b for p in shown for _, l, isr in series[p] for b in ([l] if l is not None else []) + isr})
    fig = Figure(figsize=(WIDTH_IN, 1.2 + (0.9 + 0.28 * max(1, len(brokers))) * len(shown)))
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    end_t = d.duration - d.origin
    for ax, p in zip(axes, shown):
        ser = series[p]
        times = [s[0] for s in ser]
        gaps = np.diff(times) if len(times) > 1 else np.array([0.5])
        step = float(np.median(gaps)) if len(gaps) else 0.5
        ends = times[1:] + [max(end_t, times[-1] + step)]
        for b in brokers:
            segs, start = [], None
            for (t, _, isr), e in zip(ser, ends):
                if b in isr:
                    if start is None:
                        start = t
                    seg_end = e
                elif start is not None:
                    segs.append((start, seg_end - start))
                    start = None
            if start is not None:
                segs.append((start, seg_end - start))
            if segs:
                ax.broken_barh(segs, (b - 0.3, 0.6), facecolors="#a5d8ff", edgecolors="none", zorder=1)
        xs, ys = [], []
        for (t, l, _), e in zip(ser, ends):
            xs += [t, e]
            ys += [l if l is not None else np.nan] * 2
        ax.plot(xs, ys, color="#212529", lw=2.0, zorder=3)
        for e in elections:
            if as_partition(e.get("partition")) == p and isinstance(e.get("time"), (int, float)):
                t = e["time"] / 1e9 - d.origin
                ax.axvline(t, color="#c92a2a", ls="--", lw=1.0, zorder=2, gid=MARKER)
                to = e.get("to_leader")
                if isinstance(to, (int, float)):
                    ax.scatter([t], [to], marker="*", s=140, color="#e03131", edgecolors="white",
                               lw=0.6, zorder=5)
        for kind, (marker, color, _) in CLEAN_KINDS.items():
            pts = [(e["time"] / 1e9 - d.origin, e["to_leader"]) for e in clean
                   if e.get("kind") == kind and as_partition(e.get("partition")) == p
                   and isinstance(e.get("time"), (int, float)) and isinstance(e.get("to_leader"), (int, float))]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=36, color=color,
                           edgecolors="white", lw=0.5, zorder=4, gid=MARKER)
        shade(ax, tl, d.origin)
        ax.set_yticks(brokers)
        ax.set_yticklabels([f"n{b}" for b in brokers])
        if brokers:
            ax.set_ylim(min(brokers) - 0.6, max(brokers) + 0.6)
        ax.set_ylabel(f"p{p}")
        ax.grid(axis="y", visible=False)
    axis = time_axis(list(axes), d)
    handles = [Patch(facecolor="#a5d8ff", label="in ISR"), Line2D([], [], color="#212529", lw=2, label="leader"),
               Line2D([], [], marker="*", ls="", color="#e03131", markersize=11, label="unclean election")]
    kinds = {e.get("kind") for e in clean}
    handles += [Line2D([], [], marker=m, ls="", color=c, label=lbl) for k, (m, c, lbl) in CLEAN_KINDS.items()
                if k in kinds]
    rows = legend(axes[0], handles + fault_handles(tl), ncol=8)
    return Plot("leaders", title, caption, png(fig, rows), **axis)


def plot_context() -> Any:
    """The style every plot is drawn in (a context manager)."""
    return matplotlib.rc_context(RC)


def make_plots(d: Digest, tl: FaultTimeline, anomalies: dict[str, list[dict[str, Any]]],
               elections: list[dict[str, Any]] | None, availability: list[dict[str, Any]] | None,
               all_elections: list[dict[str, Any]] | None = None, made: dict[str, Plot] | None = None) -> list[Plot]:
    """The report's plots in order; ``made``: plots already drawn, by name
    (reports/early.py draws the latency plot while the checkers run)."""
    derived = elections is None
    if elections is None:
        elections = _derive_elections(d.samples)
    plots = []
    made = made or {}
    with plot_context():
        for name, fn in (("throughput", lambda: throughput_plot(d, tl, availability)),
                         ("latency", lambda: latency_plot(d, tl)),
                         ("offsets", lambda: offsets_plot(d, tl, anomalies, elections)),
                         ("unseen", lambda: unseen_plot(d, tl)),
                         ("lag", lambda: lag_plot(d, tl)),
                         ("leaders", lambda: leaders_plot(d, tl, elections, derived, all_elections))):
            if name in made:
                plots.append(made[name])
                continue
            try:
                plots.append(fn())
            except Exception as e:  # a plot must never sink the report
                log.exception("plot %s failed", name)
                plots.append(Plot(name, name, "", None, f"This plot failed: {type(e).__name__}: {e}"))
    return plots
