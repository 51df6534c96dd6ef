"""The share of the workload's time in which writes were acknowledged.

A run that cannot write tests little, so the report and the console say how
much of the workload time writes went through. Pure: from the history's digest
(``Digest.write_start``, ``write_end``, ``write_acks``: every op counted).

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

import numpy as np

from .digest import Digest

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


def write_availability(d: Digest, bucket_s: float = 1.0) -> WriteAvailability | None:
    """None when the history has no client op outside the drain."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive, got {bucket_s}")
    start, end = d.write_start, d.write_end
    if start is None or end is None or end < start:
        return None
    width = bucket_s * NS
    slices = max(1, math.ceil((end - start) / width))
    acked = d.write_acks[d.write_acks >= start]
    hit = np.zeros(slices, bool)
    hit[np.minimum(slices - 1, (acked - start) // width).astype(np.int64)] = True
    gaps = np.diff(np.flatnonzero(np.r_[True, hit, True])) - 1     # runs of slices without one
    return WriteAvailability(slices=slices, acked=int(hit.sum()), longest_gap=int(gaps.max()), bucket_s=bucket_s)
