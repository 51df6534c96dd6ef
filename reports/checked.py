"""What a run checked, in a few lines a person reads first (issue 33).

A valid report has no story to tell, so it opens with what the checkers
looked at: the acknowledged writes and how many were read back, the reads
checked, the elections by kind, the faults by kind with their count and
time, the share of the workload with acknowledged writes, and whether the
controllers' metadata logs agreed. Pure: from the
results, the history's digest and its fault timeline.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from .availability import WriteAvailability
from .controller_logs import agreement_line
from .digest import Digest
from .faults import FaultTimeline


def _count(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _writes_line(stats: dict[str, Any], d: Digest) -> str:
    acked, read = _count(stats.get("acknowledged")), _count(stats.get("read"))
    if acked is None:   # older results: count from the history (distinct values per partition)
        acked = read = 0
        for a in d.acks.values():
            values, first = np.unique(a.value, return_index=True)
            acked += len(values)
            read += int((~np.isnan(a.seen[first])).sum())
    if read is None:
        return f"{acked} acknowledged; how many were read back is not recorded"
    return f"{acked} acknowledged, {read} of them read back"


def _reads_line(stats: dict[str, Any], d: Digest) -> str:
    ops = stats.get("ops") if isinstance(stats.get("ops"), dict) else {}
    counts = {f: (c.get("ok") if isinstance(c, dict) else None) for f, c in ops.items()} or \
        {f: c.get("ok", 0) for f, c in d.op_counts.items()}
    polls, txns = _count(counts.get("poll")) or 0, _count(counts.get("txn")) or 0
    bits = [_plural(polls, "completed poll")] if polls else []
    if txns:
        bits.append(_plural(txns, "committed transaction") + " (their reads included)")
    return "; ".join(bits) or "no completed reads"


def _elections_line(source: dict[str, Any] | None, unclean: list[dict[str, Any]], has_results: bool) -> str:
    if source is not None:
        kinds = ", ".join(f"{n} {k}" for k, n in source["counts"]) or "none"
        return f"{kinds} (from {source['label']})"
    if not has_results:
        return "unknown: no checker results"
    return f"{len(unclean)} unclean (no other elections recorded)"


def _faults_line(tl: FaultTimeline, origin: float) -> str:
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for iv in tl.intervals:
        by_kind[iv.kind].append(iv)
    if not by_kind:
        return "none in the history"
    bits = []
    for kind, ivs in by_kind.items():
        total = sum(iv.end - iv.start for iv in ivs)
        first = min(iv.start for iv in ivs) - origin
        bits.append(f"{kind} ({_plural(len(ivs), 'interval')}, {total:.1f} s in all, the first at {first:.1f} s)")
    return "; ".join(bits)


def checked_lines(results: dict[str, Any] | None, stats: dict[str, Any], d: Digest, tl: FaultTimeline,
                  source: dict[str, Any] | None, unclean: list[dict[str, Any]],
                  wa: WriteAvailability | None) -> list[tuple[str, str]]:
    """[(label, line)] for the top of the report; times from the workload's start.
    The controllers' metadata logs get a line when the run stored them."""
    raft = agreement_line(stats.get("raft_log"))
    return [
        ("writes", _writes_line(stats, d)),
        ("reads checked", _reads_line(stats, d)),
        ("elections", _elections_line(source, unclean, results is not None)),
        ("faults", _faults_line(tl, d.origin)),
        ("write availability", wa.line() if wa is not None else "no client operations"),
    ] + ([("controllers' metadata logs", raft)] if raft else [])
