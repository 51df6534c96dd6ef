"""Progress where a fault does not reach: for each fault interval, the
acknowledged writes per partition, split into the partitions the fault
impaired and the rest (docs/design.md, "Progress where a fault does not
reach").

A fault should test what it touches, not stall the workload everywhere: a
client-side cut of one partition's leader that stops writes on every
partition says more about the workload than about Kafka. Pure: from the
fault intervals (``history.fault_intervals``), the metadata samples (the
sampler's leader and ISR per partition) and the acknowledged writes' times.

A partition is impaired by a fault when the fault names it (``partition`` in
the nemesis op's value), when its leader (the last sample before the fault,
or any sample during it) is one of the fault's nodes or missing, or when a
sample during the fault shows its ISR below min.insync.replicas. A fault tied
to no nodes impairs every partition: nothing says it did not reach them.
"""
from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from history.fault_intervals import FaultInterval, affected_nodes

NS = 1_000_000_000

# (time ns, {partition: (leader or None, isr)}): the sampler's view of the topic
Sample = tuple[int, Mapping[int, tuple[Any, Sequence[Any]]]]


@dataclass(frozen=True)
class FaultProgress:
    """One fault interval's writes: acknowledged messages per partition
    (completions in the interval), and which partitions it impaired."""

    fault: str
    start: int                          # ns, the fault's start op's invocation
    end: int                            # ns, the op that ended it (the workload's end if none did)
    impaired: frozenset[int]
    acks: Mapping[int, int]             # partition -> acknowledged messages in the interval
    baseline: Mapping[int, float]       # partition -> acks per second outside every fault
    start_index: int | None = None      # the fault's start op (its invoke's index)

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start) / NS)

    def unimpaired(self) -> list[int]:
        return sorted(p for p in self.acks if p not in self.impaired)

    def rate(self, p: int) -> float:
        """Partition ``p``'s acks per second during the interval."""
        return self.acks.get(p, 0) / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "start": self.start, "end": self.end, "impaired": sorted(self.impaired),
                "acks": {str(p): n for p, n in sorted(self.acks.items())},
                "baseline": {str(p): round(r, 3) for p, r in sorted(self.baseline.items())}}


@dataclass(frozen=True)
class ProgressSeconds:
    """The run's fault seconds (1 s slices of the workload that a fault
    covers at least half of) in which some partition no fault in force
    impaired exists, and how many of them had an acknowledged write on such a partition."""

    seconds: int
    progressing: int

    @property
    def share(self) -> float:
        return self.progressing / self.seconds if self.seconds else 1.0

    def line(self) -> str:
        return (f"writes acknowledged on unimpaired partitions in {self.progressing} of {self.seconds} "
                f"fault seconds ({self.share:.0%})")


def node_id(name: Any) -> Any:
    """A node as the samples name its broker: ``"n3"`` -> 3 (the harness names node i ``n<i>``)."""
    m = re.fullmatch(r"\D*(\d+)", str(name))
    return int(m.group(1)) if m else name


def _leaders_and_isrs(samples: Sequence[Sample], times: list[int], start: int, end: int,
                      p: int) -> tuple[list[Any], list[int]]:
    """Partition ``p``'s leaders (the last sample before ``start``, then every
    sample up to ``end``) and ISR sizes (samples in [start, end])."""
    lo = max(0, bisect.bisect_right(times, start) - 1)
    leaders, isrs = [], []
    for k in range(lo, bisect.bisect_right(times, end)):
        t, parts = samples[k]
        if p in parts:
            leader, isr = parts[p]
            leaders.append(leader)
            if t >= start:
                isrs.append(len(isr or ()))
    return leaders, isrs


def impaired_partitions(iv: FaultInterval, end: int, partitions: Iterable[int], samples: Sequence[Sample],
                        min_isr: int) -> frozenset[int]:
    """The partitions fault ``iv`` impaired (the module docstring's rule)."""
    partitions = list(partitions)
    value = iv.start.value if isinstance(iv.start.value, dict) else {}
    nodes = affected_nodes(value)
    if nodes is None:
        return frozenset(partitions)
    faulted = {node_id(n) for n in nodes}
    named = value.get("partition")
    times = [t for t, _ in samples]
    out = set()
    for p in partitions:
        leaders, isrs = _leaders_and_isrs(samples, times, iv.start_time, end, p)
        if (p == named or not leaders or any(ld is None or ld in faulted or ld == -1 for ld in leaders)
                or any(n < min_isr for n in isrs)):
            out.add(p)
    return frozenset(out)


def fault_progress(intervals: Sequence[FaultInterval], ack_times: Mapping[int, Sequence[int]],
                   samples: Sequence[Sample], min_isr: int, workload: tuple[int, int]) -> list[FaultProgress]:
    """Each fault interval's progress. ``ack_times``: partition -> the
    completion times (ns) of its acknowledged messages, one per message;
    ``samples`` in time order; ``workload``: (start, end) ns of the workload,
    which ends the intervals still open and bounds the fault-free baseline."""
    w0, w1 = workload
    partitions = sorted(set(ack_times) | {p for _, parts in samples for p in parts})
    spans = [(iv.start_time, iv.end_time if iv.end_time is not None else w1) for iv in intervals]
    sorted_acks = {p: sorted(ts) for p, ts in ack_times.items()}
    baseline = _baseline(sorted_acks, spans, w0, w1)
    out = []
    for iv, (a, b) in zip(intervals, spans):
        acks = {p: bisect.bisect_left(sorted_acks.get(p, []), b) - bisect.bisect_left(sorted_acks.get(p, []), a)
                for p in partitions}
        out.append(FaultProgress(iv.fault, a, b, impaired_partitions(iv, b, partitions, samples, min_isr),
                                 acks, baseline, iv.start.index))
    return out


def _baseline(acks: Mapping[int, list[int]], spans: list[tuple[int, int]], w0: int, w1: int) -> dict[int, float]:
    """Acks per second of each partition in the workload time no fault covers."""
    merged: list[list[int]] = []
    for a, b in sorted((max(a, w0), min(b, w1)) for a, b in spans):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    free = (w1 - w0 - sum(b - a for a, b in merged)) / NS
    out = {}
    for p, ts in acks.items():
        inside = sum(bisect.bisect_left(ts, b) - bisect.bisect_left(ts, a) for a, b in merged)
        n = bisect.bisect_left(ts, w1) - bisect.bisect_left(ts, w0) - inside
        out[p] = n / free if free > 0 else 0.0
    return out


def progress_seconds(progress: Sequence[FaultProgress], ack_times: Mapping[int, Sequence[int]],
                     workload: tuple[int, int]) -> ProgressSeconds:
    """The run's fault seconds with acknowledged writes on unimpaired
    partitions: in a second covered by several faults, a partition any of them
    impaired is impaired."""
    w0, w1 = workload
    if w1 <= w0 or not progress:
        return ProgressSeconds(0, 0)
    slices = max(1, math.ceil((w1 - w0) / NS))
    partitions = set(ack_times) | {p for fp in progress for p in fp.acks}
    sorted_acks = {p: sorted(ts) for p, ts in ack_times.items()}
    seconds = progressing = 0
    for k in range(slices):
        a, b = w0 + k * NS, min(w1, w0 + (k + 1) * NS)
        covering = [fp for fp in progress if min(b, fp.end) - max(a, fp.start) >= (b - a) / 2 > 0]
        if not covering:
            continue
        free = partitions - set().union(*(fp.impaired for fp in covering))
        if not free:
            continue
        seconds += 1
        ts_of = (sorted_acks.get(p, []) for p in free)
        if any(bisect.bisect_left(ts, b) > bisect.bisect_left(ts, a) for ts in ts_of):
            progressing += 1
    return ProgressSeconds(seconds, progressing)


def too_little_progress(progress: Sequence[FaultProgress], min_progress: float,
                        min_seconds: float = 1.0) -> list[tuple[FaultProgress, int]]:
    """(fault, partition) pairs where an unimpaired partition's acks per
    second fell below ``min_progress`` times its fault-free rate (faults
    shorter than ``min_seconds`` and partitions with no fault-free writes are
    not judged). A partition another fault impaired at the same time is
    not judged either."""
    out = []
    for fp in progress:
        if fp.seconds < min_seconds:
            continue
        others = set().union(*(o.impaired for o in progress
                               if o is not fp and o.start < fp.end and fp.start < o.end))
        for p in fp.unimpaired():
            if p in others or fp.baseline.get(p, 0.0) <= 0:
                continue
            if fp.rate(p) < min_progress * fp.baseline[p]:
                out.append((fp, p))
    return out
