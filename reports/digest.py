"""One pass over the history that gathers what the plots and tables need."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from history.ops import COMPLETIONS, INVOKE, NEMESIS, OK, SAMPLER, Op


def as_partition(p: Any) -> Any:
    """Partitions are ints; poll values key them by string."""
    if isinstance(p, bool):
        return p
    if isinstance(p, int):
        return p
    if isinstance(p, str):
        try:
            return int(p)
        except ValueError:
            return p
    if isinstance(p, float) and p.is_integer():
        return int(p)
    return p


def _ns(op: Op) -> float:
    t = op.get("time", 0)
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


@dataclass
class Digest:
    n_ops: int = 0
    duration: float = 0.0                      # seconds: the history's last time
    # the workload's start (s): the first client op's time (sampler and nemesis
    # ops may come a little before or after it); None when there is no client op
    start: float | None = None
    # client completions: (time s, type, f)
    completions: list[tuple[float, str, str]] = field(default_factory=list)
    # (completion time s, latency ms, type)
    latencies: list[tuple[float, float, str]] = field(default_factory=list)
    # partition -> [(ack time s, offset, value)]
    acks: dict[Any, list[tuple[float, Any, Any]]] = field(default_factory=lambda: defaultdict(list))
    ack_time: dict[tuple[Any, Any], float] = field(default_factory=dict)  # (partition, value) -> s
    # (time s, {"controller": .., "partitions": {p: {...}}})
    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    # (partition, value) -> first time (s) any poll (drain included) returned it
    first_read: dict[tuple[Any, Any], float] = field(default_factory=dict)
    # non-drain ok polls: (invoke time s, partition, offset of the poll's last record of it)
    positions: list[tuple[float, Any, Any]] = field(default_factory=list)
    op_counts: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    processes: set[Any] = field(default_factory=set)
    partitions: set[Any] = field(default_factory=set)

    @property
    def origin(self) -> float:
        """Time 0 of the plots, in seconds since the harness started: the workload's start."""
        return self.start if self.start is not None else 0.0

    @property
    def setup(self) -> float:
        """Seconds from the harness's start to the workload's (0 without client ops)."""
        return self.origin

    @property
    def span(self) -> float:
        """Seconds from the workload's start to the history's end."""
        return max(0.0, self.duration - self.origin)

    def sorted_partitions(self) -> list[Any]:
        return sorted(self.partitions, key=lambda p: (not isinstance(p, int), str(p) if not isinstance(p, int) else p))


def digest(ops: Iterable[Op]) -> Digest:
    d = Digest()
    invoked: dict[Any, float] = {}
    for op in ops:
        d.n_ops += 1
        t = _ns(op) / 1e9
        if t > d.duration:
            d.duration = t
        proc = op.get("process")
        typ = op.get("type")
        f = op.get("f")
        f = f if isinstance(f, str) else str(f)
        if proc == SAMPLER:
            v = op.get("value")
            if f == "sample" and isinstance(v, dict):
                parts = v.get("partitions")
                if isinstance(parts, dict):
                    for p in parts:
                        d.partitions.add(as_partition(p))
                d.samples.append((t, v))
            continue
        if proc == NEMESIS:
            continue
        try:
            hash(proc)
        except TypeError:
            proc = str(proc)
        d.processes.add(proc)
        timed = isinstance(op.get("time"), (int, float)) and not isinstance(op.get("time"), bool)
        if timed and (d.start is None or t < d.start):
            d.start = t
        if typ == INVOKE:
            invoked[proc] = t
            continue
        if typ not in COMPLETIONS:
            continue
        d.op_counts[f][typ] += 1
        d.completions.append((t, typ, f))
        t0 = invoked.pop(proc, None)
        if t0 is not None:
            d.latencies.append((t, max(0.0, (t - t0) * 1e3), typ))
        v = op.get("value")
        if f == "send" and isinstance(v, list):
            for m in v:
                if isinstance(m, (list, tuple)) and len(m) >= 1:
                    p = as_partition(m[0])
                    try:
                        hash(p)
                    except TypeError:
                        continue
                    d.partitions.add(p)
                    if typ == OK and len(m) >= 3 and isinstance(m[2], (int, float)):
                        val = m[1] if len(m) >= 2 else None
                        d.acks[p].append((t, m[2], val))
                        try:
                            d.ack_time[(p, val)] = t
                        except TypeError:
                            pass
        elif f == "poll" and isinstance(v, dict):
            for key, recs in v.items():
                p = as_partition(key)
                try:
                    hash(p)
                except TypeError:
                    continue
                d.partitions.add(p)
                if typ != OK or not isinstance(recs, list):
                    continue
                last = None
                for r in recs:
                    if isinstance(r, (list, tuple)) and len(r) >= 2:
                        last = r[0]
                        try:
                            if (p, r[1]) not in d.first_read:
                                d.first_read[(p, r[1])] = t
                        except TypeError:
                            pass
                if last is not None and not op.get("drain") and t0 is not None:
                    d.positions.append((t0, p, last))
    return d
