"""The share of the workload's time in which writes were acknowledged.

A run that cannot write tests little, so the report and the console say how
much of the workload time writes went through. Pure: from the history's ops.

The workload time runs from the first client invocation to the last
completion of a client op that is not part of the final drain, cut into
``bucket_s`` slices (1 s). A slice counts when a send completion in it
acknowledged at least one message (an offset in its value: every message of
an ``ok`` send, the acknowledged ones of a mixed ``info`` send), or when a
transaction that wrote committed in it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from history.ops import acknowledged_offsets

NS = 1_000_000_000


@dataclass(frozen=True)
class WriteAvailability:
    slices: int            # slices of the workload time
    acked: int             # slices in which some write was acknowledged
    longest_gap: int       # the longest run of consecutive slices without one
    bucket_s: float = 1.0

    @property
    def share(self) -> float:
        return self.acked / self.slices if self.slices else 0.0

    def line(self) -> str:
        unit = "s" if self.bucket_s == 1 else f" x {self.bucket_s:g} s"
        return (f"writes acknowledged in {self.acked} of {self.slices}{unit} of the workload "
                f"({self.share:.0%}); longest stretch without: {self.longest_gap * self.bucket_s:g} s")


def _acknowledges(value: Any) -> bool:
    """A send completion's value with an offset in some message."""
    return next(acknowledged_offsets(value), None) is not None


def _commits_a_write(value: Any) -> bool:
    """A committed txn's value with a send micro-op that has its offset."""
    return isinstance(value, list) and any(
        isinstance(m, list) and m[:1] == ["send"] and len(m) == 4 and type(m[3]) is int for m in value)


def write_availability(ops: Iterable[dict[str, Any]], bucket_s: float = 1.0) -> WriteAvailability | None:
    """None when the history has no client op outside the drain."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive, got {bucket_s}")
    start = end = None
    acked_times: list[int] = []
    for op in ops:
        process, t = op.get("process"), op.get("time")
        if type(process) is not int or type(t) is not int or op.get("drain"):
            continue
        kind = op.get("type")
        if kind == "invoke":
            if start is None or t < start:
                start = t
            continue
        if end is None or t > end:
            end = t
        if (op.get("f") == "send" and kind in ("ok", "info") and _acknowledges(op.get("value"))) or \
                (op.get("f") == "txn" and kind == "ok" and _commits_a_write(op.get("value"))):
            acked_times.append(t)
    if start is None or end is None or end < start:
        return None
    width = bucket_s * NS
    slices = max(1, math.ceil((end - start) / width))
    hit = {min(slices - 1, int((t - start) // width)) for t in acked_times if t >= start}
    longest = run = 0
    for i in range(slices):
        run = 0 if i in hit else run + 1
        longest = max(longest, run)
    return WriteAvailability(slices=slices, acked=len(hit), longest_gap=longest, bucket_s=bucket_s)
