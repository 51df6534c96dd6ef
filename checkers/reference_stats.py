"""The reference engine's statistics of a run (op counts, availability,
acknowledged and read values, drain, realtime lag): what the report plots
beside the anomalies. Definitions only; see reference.py for the terms."""
from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from .common import lag_summary, percentile
from .committed_offsets import UNKNOWN_OFFSETS_STAT, phantom_commits
from .groups import UNKNOWN_STAT, unknown_consumption

if TYPE_CHECKING:
    from .run_index import RunIndex

NS = 1_000_000_000


def stats(run: "RunIndex") -> dict[str, Any]:
    """Op counts, availability per second, acknowledged/read values, drain,
    and realtime lag: per non-drain ok poll and partition, at the poll's last
    read of it (the consumer's position), how long before the poll was invoked
    an ack at a higher offset existed (0 if none)."""
    ops: dict[str, dict[str, int]] = {}
    for o in run.recorded:            # ops as recorded: a settled info txn counts as info
        ops.setdefault(o.f, {"ok": 0, "fail": 0, "info": 0})[o.type] += 1
    avail = Counter((o.time // NS, o.type) for o in run.recorded if o.client and o.time is not None)
    first_ack: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for m in run.acks:
        first_ack[m.partition].append((m.offset, m.op.time))
    suffix: dict[int, tuple[list[int], list[int]]] = {}
    for p, acks in first_ack.items():
        acks.sort()
        offs = [o for o, _ in acks]
        mins, best = [0] * len(acks), None
        for i in range(len(acks) - 1, -1, -1):
            best = acks[i][1] if best is None else min(best, acks[i][1])
            mins[i] = best
        suffix[p] = (offs, mins)
    lags = []
    for op in run.polls:
        if op.type != "ok" or op.drain:
            continue
        last: dict[int, int] = {}
        for p, o, _ in op.messages:
            last[p] = o                  # the consumer's position after this poll
        for p, o in last.items():
            offs, mins = suffix.get(p, ([], []))
            k = bisect.bisect_right(offs, o)
            lags.append(max(0, op.invoke_time - mins[k]) if k < len(offs) else 0)
    lags.sort()
    ok_parts = {m.partition for m in run.ok_msgs}
    unknown = unknown_consumption(run.ops)          # groups.py; absent when none
    unknown_changes = phantom_commits(run.ops)[1]   # committed_offsets.py; absent when none
    return {
        **({UNKNOWN_STAT: unknown} if unknown else {}),
        **({UNKNOWN_OFFSETS_STAT: unknown_changes} if unknown_changes else {}),
        "ops": ops,
        "acknowledged": len({(m.partition, m.value) for m in run.ok_msgs}),
        "read": len(run.first_read),
        "drain_complete": run.drain_all_ok and ok_parts <= run.drain_parts,
        "drains": run.drain_counts,
        "availability_counts": dict(avail),
        "realtime_lag": lag_summary(*(
            (percentile(lags, 0.5), percentile(lags, 0.99), float(lags[-1])) if lags else (None,) * 3)),
    }


def ack_times(run: "RunIndex") -> dict[int, list[int]]:
    """Every acknowledged message's completion time (ns) per partition, for the
    per-fault progress step both engines share (progress_check.judge)."""
    out: dict[int, list[int]] = defaultdict(list)
    for m in run.acks:
        if m.op.time is not None:
            out[m.partition].append(m.op.time)
    return {p: sorted(ts) for p, ts in out.items()}
