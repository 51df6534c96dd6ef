"""Which planned move each lost write's acknowledgement falls in (docs/design.md,
"Planned operations"), and what Kafka's own record shows around it.

For every run folder: the lost writes (the reference checker's definition), each
one's acknowledgement time against the planned-moves fault intervals (a move's
invocation to the end-move that closed it), grouped by partition and move, and
Kafka's record around them:

- the leader change the metadata log recorded for that partition last before
  the acknowledgement (PartitionRecord/PartitionChangeRecord, on the history
  clock through the header's ``wall_ns_at_zero``: the controller's clock, no
  skew in these runs), so a write acknowledged *after* the controller moved
  leadership off the broker that acknowledged it shows as such;
- whether the partition's leader changed again before the group's last
  acknowledgement;
- the leader epoch whose start offset is the group's first lost offset, in the
  replicas' epoch lists (the new leader's log begins its epoch there: what the
  old leader wrote from that offset on was truncated);
- how many lost values any replica's log still holds, and from how many
  replicas records were read (a log over ``max_records`` is not dumped: then
  "held: 0" means not read, not absent).

A lost write is attributed to a move inside whose interval it was acknowledged
when the move's old leader is the broker leadership was last moved off for
that partition: the move's own partition, or any partition the shut-down broker
led (a controlled shutdown moves all of them).

    .venv/bin/python bench/move_attribution.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.reference import lost_messages  # noqa: E402
from checkers.run_index import RunIndex  # noqa: E402
from history.fault_intervals import FaultInterval, fault_intervals, nemesis_ops  # noqa: E402
from history.ops import read_history, workload_start_ns  # noqa: E402
from history.parquet import read_paired_ops  # noqa: E402

FAULT = "planned-moves"
SHUTDOWN = "controlled-shutdown"


class LeaderChange(NamedTuple):
    time_ns: int          # history clock
    offset: int           # in the metadata log
    leader: int
    previous: int | None  # the leader it replaced (None for the partition's first record)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]


def leader_changes(records: Sequence[dict[str, Any]], wall_ns_at_zero: int) -> dict[int, list[LeaderChange]]:
    """{partition: [LeaderChange]} from metadata.jsonl records, in log order;
    a change that names the same leader again (an ISR-only record) is left out."""
    out: dict[int, list[LeaderChange]] = defaultdict(list)
    for rec in records:
        data = rec.get("data") or {}
        if rec.get("type") not in ("PartitionRecord", "PartitionChangeRecord") or "leader" not in data:
            continue
        p = int(data.get("partitionId", 0))
        previous = out[p][-1].leader if out[p] else None
        if previous != data["leader"]:
            out[p].append(LeaderChange(rec["wall_ms"] * 1_000_000 - wall_ns_at_zero, int(rec.get("offset", -1)),
                                       data["leader"], previous))
    return out


def last_change_before(changes: Sequence[LeaderChange], t_ns: int) -> LeaderChange | None:
    """The leader change at or before ``t_ns`` (None when there is none)."""
    return next((c for c in reversed(changes) if c.time_ns <= t_ns), None)


def attributed_move(moves: Sequence[FaultInterval], partition: int, t_ns: int,
                    change: LeaderChange | None) -> tuple[FaultInterval | None, str]:
    """The move a write of ``partition`` acknowledged at ``t_ns`` is attributed to
    and how: "moved" when the move's old leader is the broker ``change`` took
    leadership off (its partition, or any partition a shut-down broker led);
    else "same partition" or "other partition" for a move it merely fell in."""
    inside = [iv for iv in moves if iv.start_time <= t_ns and (iv.end_time is None or t_ns <= iv.end_time)]
    moved_off = f"n{change.previous}" if change is not None and change.previous is not None else None
    for iv in inside:
        v = iv.start.value or {}
        if moved_off is not None and v.get("leader") == moved_off \
                and (v.get("partition") == partition or iv.start.f == SHUTDOWN):
            return iv, "moved"
    same = [iv for iv in inside if (iv.start.value or {}).get("partition") == partition]
    if same:
        return same[0], "same partition"
    return (inside[0], "other partition") if inside else (None, "outside every move")


def epoch_starting_at(replicas: Sequence[dict[str, Any]], partition: int, offset: int) -> list[str]:
    """"nX epoch E" for every replica of ``partition`` whose epoch list starts an epoch at ``offset``."""
    return [f"{rep['node']} epoch {epoch}" for rep in replicas if rep.get("partition") == partition
            for epoch, start in rep.get("epochs") or () if start == offset]


def held_values(replicas: Sequence[dict[str, Any]]) -> dict[tuple[int, int], list[str]]:
    """{(partition, value): [nodes whose log holds it]} from replicas.jsonl."""
    out: dict[tuple[int, int], list[str]] = defaultdict(list)
    for rep in replicas:
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
    changes = leader_changes(_json_lines(run_dir / "metadata.jsonl"), int(header.get("wall_ns_at_zero", 0)))
    replicas = _json_lines(run_dir / "replicas.jsonl")
    held = held_values(replicas)
    print(f"== {run_dir}: {len(lost)} lost, {len(unseen)} unseen; {len(moves)} planned moves")
    for iv in moves:
        v = iv.start.value or {}
        end = f"{secs(iv.end_time):.2f}" if iv.end_time is not None else "open"
        print(f"  move {iv.start.f} p{v.get('partition')} {v.get('leader')}->{v.get('new_leader')} "
              f"[{secs(iv.start_time):.2f}, {end}] s")
    for p, cs in sorted(changes.items()):
        print(f"  p{p} leaders: " + ", ".join(f"{secs(c.time_ns):.2f} s n{c.previous}->n{c.leader} (offset {c.offset})"
                                            for c in cs if c.previous is not None))
    groups: dict[tuple, list] = defaultdict(list)
    for m in lost:
        t = m.op.time
        change = last_change_before(changes.get(m.partition, ()), t) if t is not None else None
        iv, how = attributed_move(moves, m.partition, t, change) if t is not None else (None, "no time")
        groups[(m.partition, how, iv.start_time if iv else -1, change)].append((m, iv))
    for (p, how, _, change), items in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        ms = [m for m, _ in items]
        iv = items[0][1]
        times = sorted(m.op.time for m in ms if m.op.time is not None)
        offsets = sorted(m.offset for m in ms if m.offset is not None)
        move = (f"{how}: {iv.start.f} of {(iv.start.value or {}).get('leader')} (p{(iv.start.value or {}).get('partition')}) "
                f"at {secs(iv.start_time):.2f} s" if iv is not None else how)
        before = (f"acks +{(times[0] - change.time_ns) / 1e9:.3f}..+{(times[-1] - change.time_ns) / 1e9:.3f} s after "
                  f"the controller moved p{p} n{change.previous}->n{change.leader} (offset {change.offset})"
                  if change is not None and times else "no leader change before in the metadata log")
        again = [c for c in changes.get(p, ()) if times and times[0] < c.time_ns <= times[-1]]
        read = sum(1 for rep in replicas if rep.get("partition") == p and rep.get("records") is not None)
        still = sum(1 for m in ms if held.get((m.partition, m.value)))
        epochs = epoch_starting_at(replicas, p, offsets[0]) if offsets else []
        print(f"  {len(ms)} lost on p{p}, {move}; acks {secs(times[0]):.2f}..{secs(times[-1]):.2f} s, offsets "
              f"{offsets[0] if offsets else '-'}..{offsets[-1] if offsets else '-'}; {before}; "
              f"{'leader changed again meanwhile' if again else 'no other leader change meanwhile'}; "
              f"epoch starting at the first lost offset: {', '.join(epochs) or 'none'}; "
              f"held by a replica's log: {still} (records read from {read} replicas)")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        attribute(Path(arg))
