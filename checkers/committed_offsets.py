"""Committed offsets stay put: the definition, as plain loops (the reference
engine's; ``spark_committed_offsets.py`` computes the same on Spark).
docs/design.md, "What the checkers decide".

A group's committed offset for a partition changes only by a commit of that
group. The runner reads the committed offsets (Kafka's OffsetFetch) at each
sample and after the final drain (``offsets`` ops: history/ops.py); a read
happened somewhere between its invoke and its completion.

Terms:

* samples of (g, p): the ok ``offsets`` ops of group g whose value names
  partition p (an int offset, or null: none), in history order. Successive
  ones A then B: nothing of (g, p) was read between them.
* a change: successive samples A, B of (g, p) whose offsets differ.
* commits that may have acted between A's read and B's: the commits of group g
  (client ``commit`` ops) invoked before B completed that are not ``fail``
  (certainly not stored) and are not ``ok`` commits completed before A was
  invoked (those took effect before A's read, which saw them or a later
  value). An ``info`` commit may take effect any time after its invocation
  (librdkafka retries a commit whose answer it lost); so may an async one
  whose callback never came (it ends info).
* a commit of them explains B's offset b when it may have committed b to p:
  an ok commit that committed b for p, an info commit that asked for b for p
  (``groups.commit_offsets``). An info commit of the consumer's positions
  (no asked offsets) may have committed anything: it cannot tell.

A change is a phantom-commit when b is null (no commit deletes an offset), or
no commit that may have acted between the reads could have committed b and
none of them is an info commit of unknown offsets. A change that only such a
commit could explain is undecidable: counted in the stats
(``UNKNOWN_OFFSETS_STAT``), and the verdict is unknown rather than valid.

Witness: partition p, offsets [a, b] (-1 for none, Kafka's OffsetFetch "no
offset"), ops A, B, then the commits that may have acted between them and name
p or unknown partitions (by id); extra: group, before and after (null: none).
Order (partition, B id, group).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from .common import Finding, Settings, Witness
from .groups import commit_offsets
from history.ops import COMMIT, OFFSET_SAMPLER, OFFSETS
from history.op_values import committed_offsets_view
from history.paired import PairedOp

OFFSET_TYPES = ("phantom-commit",)
# stats key: offset changes only an info commit of unknown offsets could explain
UNKNOWN_OFFSETS_STAT = "unknown_offset_changes"
NO_OFFSET = -1


def offset_samples(ops: list[PairedOp]) -> dict[tuple[str, int], list[tuple[PairedOp, int | None]]]:
    """(group, partition) -> the ok samples naming it, with the offset read, in history order."""
    out: dict[tuple[str, int], list[tuple[PairedOp, int | None]]] = defaultdict(list)
    for op in sorted(ops, key=lambda o: o.invoke_index):
        if op.role == OFFSET_SAMPLER and op.f == OFFSETS and op.type == "ok" and op.group is not None:
            for p, off in committed_offsets_view(op.value, f"op index {op.invoke_index}"):
                out[(op.group, p)].append((op, off))
    return out


def _commits(ops: list[PairedOp]) -> dict[str, list[tuple[PairedOp, dict[int, int] | None]]]:
    """group -> its non-fail commits with what each may have committed (None: anything)."""
    out: dict[str, list[tuple[PairedOp, dict[int, int] | None]]] = defaultdict(list)
    for op in ops:
        if op.client and op.f == COMMIT and op.group is not None and op.type != "fail":
            out[op.group].append((op, commit_offsets(op.type, op.committed, op.value)))
    return out


def phantom_commits(ops: list[PairedOp]) -> tuple[list[tuple[Any, Witness]], int]:
    """(phantom-commit items, how many changes are undecidable)."""
    commits = _commits(ops)
    items: list[tuple[Any, Witness]] = []
    unknown = 0
    for (g, p), samples in offset_samples(ops).items():
        for (a_op, a), (b_op, b) in zip(samples, samples[1:]):
            if a == b:
                continue
            acting = [(c, offs) for c, offs in commits.get(g, ())
                      if c.invoke_time < b_op.time and (c.type != "ok" or c.time > a_op.invoke_time)]
            between = [(c, offs) for c, offs in acting if offs is None or p in offs]
            if b is not None and any(offs is not None and offs[p] == b for _, offs in between):
                continue
            if b is not None and any(offs is None for _, offs in between):
                unknown += 1
                continue
            ids = sorted(c.id for c, _ in between)
            items.append(((p, b_op.id, g), Witness(
                p, [NO_OFFSET if a is None else a, NO_OFFSET if b is None else b], [], [a_op.id, b_op.id, *ids],
                extra={"group": g, "before": a, "after": b})))
    return items, unknown


def check_phantom_commits(ops: list[PairedOp], settings: Settings) -> tuple[Finding, int]:
    """The phantom-commit finding and the count of undecidable changes."""
    items, unknown = phantom_commits(ops)
    items.sort(key=lambda kw: kw[0])
    return Finding(count=len(items), witnesses=[w for _, w in items[: settings.max_witnesses]]), unknown
