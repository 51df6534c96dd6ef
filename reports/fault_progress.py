"""The report's per-fault progress table: for each fault interval, the
acknowledged writes per partition, the partitions it impaired marked, and the
run's share of fault seconds with writes on unimpaired partitions
(checkers/progress.py has the rule; docs/design.md, "Progress where a fault
does not reach"). Pure: from the history's digest and the run's config.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkers.progress import (FaultProgress, ProgressSeconds, Rule, Sample, fault_progress, progress_seconds,
                               waits_for_isr)
from history.fault_intervals import fault_intervals

from .digest import Digest

NS = 1_000_000_000


@dataclass(frozen=True)
class RunProgress:
    faults: list[FaultProgress]
    seconds: ProgressSeconds
    origin_ns: int                 # the workload's start: the table's time 0


def min_insync_of(config: dict[str, Any]) -> int:
    """The run topic's min.insync.replicas as config.json stores it (topic, else broker, else Kafka's 1)."""
    for table in ("topic", "broker"):
        t = config.get(table) if isinstance(config.get(table), dict) else {}
        if t.get("min.insync.replicas") is not None:
            try:
                return int(t["min.insync.replicas"])
            except (TypeError, ValueError):
                pass
    return 1


def digest_samples(d: Digest) -> list[Sample]:
    """The sampler's leader and ISR per partition, as checkers.progress reads them."""
    out: list[Sample] = []
    for t, value in d.samples:
        parts = value.get("partitions") if isinstance(value, dict) else None
        if not isinstance(parts, dict):
            continue
        view = {}
        for p, s in parts.items():
            try:
                view[int(p)] = (s.get("leader"), list(s.get("isr") or []))
            except (TypeError, ValueError, AttributeError):
                continue
        out.append((int(round(t * NS)), view))
    out.sort(key=lambda s: s[0])
    return out


def run_progress(d: Digest, config: dict[str, Any]) -> RunProgress | None:
    """None when the run had no fault or no client op outside the drain."""
    if d.write_start is None or d.write_end is None or d.write_end <= d.write_start:
        return None
    intervals = fault_intervals(d.nemesis)
    if not intervals:
        return None
    acks = {int(p): (a.t * NS).round().astype("int64") for p, a in d.acks.items() if isinstance(p, int)}
    workload = (d.write_start, d.write_end)
    samples = digest_samples(d)
    settings = config.get("client_settings") if isinstance(config.get("client_settings"), dict) else {}
    producer = next((t for t in (settings.get("producer"), config.get("producer")) if isinstance(t, dict)), None)
    rule = Rule(min_insync_of(config), waits_for_isr(producer))
    faults = fault_progress(intervals, acks, samples, rule, workload)
    return RunProgress(faults, progress_seconds(intervals, acks, samples, rule, workload), int(round(d.origin * NS)))


def progress_rows(rp: RunProgress | None) -> dict[str, Any] | None:
    """The template's table: a row per fault, a cell per partition."""
    if rp is None:
        return None
    partitions = sorted({p for fp in rp.faults for p in fp.acks})
    rows = []
    for fp in rp.faults:
        cells = [{"acks": fp.acks.get(p, 0), "impaired": p in fp.impaired,
                  "rate": f"unimpaired {fp.free_seconds.get(p, 0)} s, {fp.rate(p):.1f} acks/s then "
                          f"(fault-free {fp.baseline.get(p, 0.0):.1f}/s)"} for p in partitions]
        rows.append({"fault": fp.fault, "start": f"{(fp.start - rp.origin_ns) / NS:.1f}",
                     "end": f"{(fp.end - rp.origin_ns) / NS:.1f}", "seconds": f"{fp.seconds:.1f}",
                     "impaired": ", ".join(map(str, sorted(fp.impaired))) or "none",
                     "unimpaired_acks": sum(fp.free_acks.values()), "cells": cells})
    return {"line": rp.seconds.line(), "partitions": partitions, "rows": rows}
