"""Which planned move each lost write's acknowledgement falls in (docs/design.md,
"Planned operations"), and what Kafka's own record shows around it.

For every run folder: the lost writes (the reference checker's definition), each
one's acknowledgement time against the planned-moves fault intervals (a move's
invocation to the end-move that closed it), grouped by partition and move; the
first leader change the metadata log records for that partition after the
acknowledgement (PartitionChangeRecord, on the history clock through the
header's ``wall_ns_at_zero``: the controller's clock, no skew in these runs);
and how many of the lost values any replica's log still holds.

    .venv/bin/python bench/move_attribution.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.reference import lost_messages  # noqa: E402
from checkers.run_index import RunIndex  # noqa: E402
from history.fault_intervals import fault_intervals, nemesis_ops  # noqa: E402
from history.ops import read_history, workload_start_ns  # noqa: E402
from history.parquet import read_paired_ops  # noqa: E402

FAULT = "planned-moves"


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]


def leader_changes(run_dir: Path, wall_ns_at_zero: int) -> dict[int, list[tuple[int, int, int | None]]]:
    """{partition: [(history ns, new leader, leader epoch)]} from metadata.jsonl, in log order."""
    out: dict[int, list[tuple[int, int, int | None]]] = defaultdict(list)
    for rec in _json_lines(run_dir / "metadata.jsonl"):
        data = rec.get("data") or {}
        if rec.get("type") in ("PartitionRecord", "PartitionChangeRecord") and "leader" in data:
            out[int(data.get("partitionId", 0))].append(
                (rec["wall_ms"] * 1_000_000 - wall_ns_at_zero, data["leader"], data.get("leaderEpoch")))
    return out


def held_values(run_dir: Path) -> dict[tuple[int, int], list[str]]:
    """{(partition, value): [nodes whose log holds it]} from replicas.jsonl."""
    out: dict[tuple[int, int], list[str]] = defaultdict(list)
    for rep in _json_lines(run_dir / "replicas.jsonl"):
        for rec in rep.get("records") or ():
            out[(rep["partition"], rec[1])].append(rep["node"])
    return out


def attribute(run_dir: Path) -> None:
    ops = list(read_history(run_dir / "history.jsonl"))
    header = json.loads((run_dir / "history.jsonl").read_text().split("\n", 1)[0])
    zero = workload_start_ns(ops)
    secs = lambda ns: (ns - zero) / 1e9  # noqa: E731 - seconds since the workload started
    moves = [iv for iv in fault_intervals(nemesis_ops(ops)) if iv.fault == FAULT]
    lost, unseen = lost_messages(RunIndex(read_paired_ops(run_dir / "history.jsonl")))
    changes = leader_changes(run_dir, int(header.get("wall_ns_at_zero", 0)))
    held = held_values(run_dir)
    print(f"== {run_dir}: {len(lost)} lost, {len(unseen)} unseen; {len(moves)} planned moves")
    for iv in moves:
        v = iv.start.value or {}
        end = f"{secs(iv.end_time):.2f}" if iv.end_time is not None else "open"
        print(f"  move {iv.start.f} p{v.get('partition')} {v.get('leader')}->{v.get('new_leader')} "
              f"[{secs(iv.start_time):.2f}, {end}] s")
    groups: dict[str, list] = defaultdict(list)
    for m in lost:
        t = m.op.time
        inside = [iv for iv in moves if t is not None and iv.start_time <= t
                  and (iv.end_time is None or t <= iv.end_time)]
        same = [iv for iv in inside if (iv.start.value or {}).get("partition") == m.partition]
        key = (f"p{m.partition} inside {same[0].start.f} of p{m.partition} at {secs(same[0].start_time):.2f} s"
               if same else f"p{m.partition} inside {inside[0].start.f} of another partition" if inside
               else f"p{m.partition} outside every move")
        groups[key].append(m)
    for key, ms in sorted(groups.items()):
        acks = sorted(secs(m.op.time) for m in ms if m.op.time is not None)
        first_ack_ns = min(m.op.time for m in ms if m.op.time is not None)
        after = next(((ns, leader, epoch) for ns, leader, epoch in changes.get(ms[0].partition, ())
                      if ns >= first_ack_ns), None)
        still = sum(1 for m in ms if held.get((m.partition, m.value)))
        change = (f"first leader change after: +{(after[0] - first_ack_ns) / 1e9:.3f} s to n{after[1]} "
                  f"(epoch {after[2]})" if after else "no leader change after in the metadata log")
        offsets = sorted(m.offset for m in ms if m.offset is not None)
        print(f"  {len(ms)} lost {key}: acks {acks[0]:.2f}..{acks[-1]:.2f} s, offsets "
              f"{offsets[0] if offsets else '-'}..{offsets[-1] if offsets else '-'}; {change}; "
              f"held by a replica's log: {still}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        attribute(Path(arg))
