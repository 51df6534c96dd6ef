"""Unclean elections from the metadata samples: the one computation of them.

Both checker engines, the report's plots and anything else that needs the
elections of a run call ``unclean_elections``; samples are few (one per
partition every few hundred milliseconds), so this is plain Python.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .history import PartitionSample


@dataclass(frozen=True)
class Sample:
    """One sampler op: its id (invoke index), completion index and time."""

    id: int
    index: int | None
    time: int | None
    partitions: list[PartitionSample]


def unclean_elections(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """A partition's new (non-null) leader that differs from its last known
    leader and is not in the ISR of the partition's previous sample (an
    empty ISR says nothing). In sample order; ``ids`` are the two samples'."""
    state: dict[int, tuple[int | None, list[int] | None, int | None]] = {}
    out = []
    for s in sorted(samples, key=lambda s: s.id):
        for p, leader, isr, epoch in s.partitions:
            last_leader, prev_isr, prev_id = state.get(p, (None, None, None))
            if (leader is not None and last_leader is not None and leader != last_leader
                    and prev_isr and leader not in prev_isr):
                out.append({"partition": p, "time": s.time, "index": s.index,
                            "from_leader": last_leader, "to_leader": leader, "epoch": epoch,
                            "last_isr": list(prev_isr), "ids": [prev_id, s.id]})
            state[p] = (leader if leader is not None else last_leader, isr, s.id)
    return out


def attribute(elections: list[dict[str, Any]], partition: int, t: int) -> dict[str, Any] | None:
    """The first election on ``partition`` strictly after time ``t``."""
    later = [e for e in elections if e["partition"] == partition and e["time"] > t]
    return min(later, key=lambda e: (e["time"], e["index"])) if later else None
