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
or any sample during it) is one of the fault's nodes (``faulted_nodes``) or
missing, when a sample shows its ISR below min.insync.replicas, or, with a
producer that waits for the whole ISR (acks=all), when its ISR still names a
faulted node: the leader holds every ack until the ISR shrinks (not for a
client-side cut, which leaves replication alone). A fault tied
to no nodes impairs every partition: nothing says it did not reach them.
Impairment is judged per 1 s slice, from the samples in force then: a
partition whose ISR shrank away from an isolated follower takes writes again.
"""
from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from history.fault_intervals import FaultInterval, affected_nodes

NS = 1_000_000_000

# (time ns, {partition: (leader or None, isr)}): the sampler's view of the topic
Sample = tuple[int, Mapping[int, tuple[Any, Sequence[Any]]]]


@dataclass(frozen=True)
class FaultProgress:
    """One fault interval's writes: acknowledged messages per partition
    (completions in the interval), which partitions it impaired at some time,
    and per partition the interval's seconds in which no fault in force
    impaired it and the acks in those seconds."""

    fault: str
    start: int                          # ns, the fault's start op's invocation
    end: int                            # ns, the op that ended it (the workload's end if none did)
    impaired: frozenset[int]
    acks: Mapping[int, int]             # partition -> acknowledged messages in the interval
    baseline: Mapping[int, float]       # partition -> acks per second outside every fault
    start_index: int | None = None      # the fault's start op (its invoke's index)
    free_seconds: Mapping[int, int] = field(default_factory=dict)   # partition -> seconds unimpaired
    free_acks: Mapping[int, int] = field(default_factory=dict)      # partition -> acks in those seconds

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start) / NS)

    def unimpaired(self) -> list[int]:
        """Partitions with a second of the interval that no fault in force impaired."""
        return sorted(p for p, n in self.free_seconds.items() if n)

    def rate(self, p: int) -> float:
        """Partition ``p``'s acks per second in the interval's seconds no fault impaired it."""
        n = self.free_seconds.get(p, 0)
        return self.free_acks.get(p, 0) / n if n else 0.0


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
        if not self.seconds:        # every fault second had every partition impaired: nothing to judge
            return "no fault second left a partition unimpaired: progress where faults did not reach is not judged"
        return (f"writes acknowledged on unimpaired partitions in {self.progressing} of {self.seconds} "
                f"fault seconds ({self.share:.0%})")


def node_id(name: Any) -> Any:
    """A node as the samples name its broker: ``"n3"`` -> 3 (the harness names node i ``n<i>``)."""
    m = re.fullmatch(r"\D*(\d+)", str(name))
    return int(m.group(1)) if m else name


def faulted_nodes(value: dict[str, Any]) -> frozenset[str] | None:
    """The nodes a fault cut off: a network partition's ``isolated`` node(s)
    when it names them (its ``nodes`` are every node whose rules changed, the
    other side included), else the op's ``nodes``; None when it names none."""
    isolated = affected_nodes({"nodes": value["isolated"]}) if "isolated" in value else None
    return isolated if isolated else affected_nodes(value)


def _states(samples: Sequence[Sample], times: list[int], start: int, end: int,
            p: int) -> list[tuple[Any, Sequence[Any]]]:
    """Partition ``p``'s (leader, ISR): the last sample at or before ``start``, then every one up to ``end``."""
    lo = max(0, bisect.bisect_right(times, start) - 1)
    return [samples[k][1][p] for k in range(lo, bisect.bisect_right(times, end)) if p in samples[k][1]]


@dataclass(frozen=True)
class Rule:
    """What impairs a partition besides its leader: an ISR below ``min_isr``;
    with ``isr_waits`` (producer acks=all) also an ISR that still names a
    faulted node, since the leader acknowledges only once every ISR member
    has the write, until the ISR shrinks."""

    min_isr: int = 1
    isr_waits: bool = False


def impaired_partitions(iv: FaultInterval, start: int, end: int, partitions: Iterable[int],
                        samples: Sequence[Sample], rule: Rule, times: list[int] | None = None) -> frozenset[int]:
    """The partitions fault ``iv`` impaired between ``start`` and ``end`` (the module docstring's rule)."""
    partitions = list(partitions)
    value = iv.start.value if isinstance(iv.start.value, dict) else {}
    nodes = faulted_nodes(value)
    if nodes is None:
        return frozenset(partitions)
    faulted = {node_id(n) for n in nodes}
    named = value.get("partition")
    # a client-side cut (it records what the clients still reach) leaves replication alone
    isr_waits = rule.isr_waits and "client_reaches" not in value
    times = [t for t, _ in samples] if times is None else times
    out = set()
    for p in partitions:
        states = _states(samples, times, start, end, p)
        if (p == named or not states
                or any(ld is None or ld == -1 or ld in faulted or len(isr or ()) < rule.min_isr
                       or (isr_waits and faulted.intersection(isr or ())) for ld, isr in states)):
            out.add(p)
    return frozenset(out)


def waits_for_isr(producer: Mapping[str, Any] | None) -> bool:
    """Whether a producer's acks setting is "all" (librdkafka's default, -1)."""
    acks = (producer or {}).get("acks", (producer or {}).get("request.required.acks", "all"))
    return str(acks).strip().lower() in ("all", "-1")


def _covering(spans: Sequence[tuple[int, int]], a: int, b: int) -> list[int]:
    """The faults (positions in ``spans``) that cover at least half of the slice [a, b)."""
    return [i for i, (s, e) in enumerate(spans) if min(b, e) - max(a, s) >= (b - a) / 2 > 0]


_NO_ACKS = np.zeros(0, np.int64)


def _sorted_acks(ack_times: Mapping[int, Sequence[int]]) -> dict[int, np.ndarray]:
    """Each partition's ack times as a sorted int64 array: a run of millions of
    acks is counted per second by search, not as Python ints."""
    return {p: np.sort(np.asarray(ts, np.int64)) for p, ts in ack_times.items()}


def _count(ts: np.ndarray, a: int, b: int) -> int:
    """Acks in [a, b)."""
    lo, hi = np.searchsorted(ts, (a, b))
    return int(hi - lo)


def fault_progress(intervals: Sequence[FaultInterval], ack_times: Mapping[int, Sequence[int]],
                   samples: Sequence[Sample], rule: Rule, workload: tuple[int, int]) -> list[FaultProgress]:
    """Each fault interval's progress. ``ack_times``: partition -> the
    completion times (ns) of its acknowledged messages, one per message;
    ``samples`` in time order; ``workload``: (start, end) ns of the workload,
    which ends the intervals still open and bounds the fault-free baseline.
    The interval is cut into 1 s slices; in each, a partition is unimpaired
    when no fault covering the slice impaired it then."""
    w0, w1 = workload
    partitions = sorted(set(ack_times) | {p for _, parts in samples for p in parts})
    spans = [(iv.start_time, iv.end_time if iv.end_time is not None else w1) for iv in intervals]
    acks = _sorted_acks(ack_times)
    baseline = _baseline(acks, spans, w0, w1)
    times = [t for t, _ in samples]
    out = []
    for iv, (a, b) in zip(intervals, spans):
        free_s = dict.fromkeys(partitions, 0)
        free_a = dict.fromkeys(partitions, 0)
        for k in range(max(0, math.ceil((b - a) / NS))):
            lo, hi = a + k * NS, min(b, a + (k + 1) * NS)
            if hi - lo < NS / 2:
                continue
            hit = set().union(*(impaired_partitions(intervals[i], lo, hi, partitions, samples, rule, times)
                                for i in _covering(spans, lo, hi)))
            for p in partitions:
                if p not in hit:
                    free_s[p] += 1
                    free_a[p] += _count(acks.get(p, _NO_ACKS), lo, hi)
        out.append(FaultProgress(iv.fault, a, b, impaired_partitions(iv, a, b, partitions, samples, rule, times),
                                 {p: _count(acks.get(p, _NO_ACKS), a, b) for p in partitions}, baseline,
                                 iv.start.index, free_s, free_a))
    return out


def _baseline(acks: Mapping[int, np.ndarray], spans: list[tuple[int, int]], w0: int, w1: int) -> dict[int, float]:
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
        inside = sum(_count(ts, a, b) for a, b in merged)
        n = _count(ts, w0, w1) - inside
        out[p] = n / free if free > 0 else 0.0
    return out


def progress_seconds(intervals: Sequence[FaultInterval], ack_times: Mapping[int, Sequence[int]],
                     samples: Sequence[Sample], rule: Rule, workload: tuple[int, int]) -> ProgressSeconds:
    """The run's fault seconds with acknowledged writes on unimpaired
    partitions: in a second covered by several faults, a partition any of them
    impaired then is impaired."""
    w0, w1 = workload
    if w1 <= w0 or not intervals:
        return ProgressSeconds(0, 0)
    partitions = sorted(set(ack_times) | {p for _, parts in samples for p in parts})
    spans = [(iv.start_time, iv.end_time if iv.end_time is not None else w1) for iv in intervals]
    acks = _sorted_acks(ack_times)
    times = [t for t, _ in samples]
    seconds = progressing = 0
    for k in range(max(1, math.ceil((w1 - w0) / NS))):
        a, b = w0 + k * NS, min(w1, w0 + (k + 1) * NS)
        covering = _covering(spans, a, b)
        if not covering:
            continue
        hit = set().union(*(impaired_partitions(intervals[i], a, b, partitions, samples, rule, times)
                            for i in covering))
        free = [p for p in partitions if p not in hit]
        if not free:
            continue
        seconds += 1
        progressing += any(_count(acks.get(p, _NO_ACKS), a, b) for p in free)
    return ProgressSeconds(seconds, progressing)


def too_little_progress(progress: Sequence[FaultProgress], min_progress: float,
                        min_seconds: int = 1) -> list[tuple[FaultProgress, int]]:
    """(fault, partition) pairs where a partition's acks per second, over the
    fault's seconds in which no fault impaired it (at least ``min_seconds``),
    fell below ``min_progress`` times its fault-free rate (a partition with no
    fault-free writes is not judged)."""
    return [(fp, p) for fp in progress for p in fp.unimpaired()
            if fp.free_seconds[p] >= min_seconds and fp.baseline.get(p, 0.0) > 0
            and fp.rate(p) < min_progress * fp.baseline[p]]
