"""Poll chains on Spark: nonmonotonic-poll and poll-skip for one partition
(definitions: reference.check_polls).

A consumer process's reads of a partition, polls' and txns' alike, sorted by
(process, drain, op, position), form its chains. Each read is judged against
its predecessor: the read before it in the same op (a poll's; successive reads
within one txn are the int-* checks'), else the last read before it of an op
that moved the chain. A txn that did not commit (aborted, or unknown and not
settled committed) moves no chain: the consumer must read again from where it
stood before that txn (KAFKA-17582), so the read after it is judged against
the position before it, and the witness names it (``after_txn``). Assigns,
subscribes and rebalances end chains as in the reference.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from history.message_index import TXN_OK_READ_OP

from .common import SKIPPED_LIMIT
from .spark_arrays import _first_k, dedup_sorted, lexsort_grouped

if TYPE_CHECKING:
    from .spark_partition import Context, PartitionLog


def poll_chains(plog: "PartitionLog") -> None:
    """nonmonotonic-poll and poll-skip over each consumer's chains; order (partition, op, position)."""
    out, ctx, run, p, k = plog.out, plog.ctx, plog.run, plog.p, plog.k
    off, val, ids, pos, proc, drain = plog.off, plog.val, plog.ids, plog.pos, plog.proc, plog.drain
    order = _chain_order(np.flatnonzero(plog.read), proc, drain, ids, pos)
    if len(order) < 2:
        out.count("nonmonotonic-poll", 0)
        out.count("poll-skip", 0)
        return
    txn = plog.txn_r[order]
    moves = ~txn | (plog.op_kind[order] == TXN_OK_READ_OP)        # reads of ops that move the chain
    at = np.arange(len(order), dtype=np.int32 if len(order) < 1 << 31 else np.int64)   # places in chain order
    last_moving = np.maximum.accumulate(np.where(moves, at, -1))  # the last such read at or before each
    ids_o = ids[order]
    same_op = ids_o[1:] == ids_o[:-1]
    pred = np.where(same_op, at[:-1], last_moving[:-1])
    del at, last_moving
    at_p = np.maximum(pred, 0)
    pr, cu = order[at_p], order[1:]
    proc_o, drain_o = proc[order], drain[order]
    chained = ((pred >= 0) & (proc_o[at_p] == proc_o[1:]) & (drain_o[at_p] == drain_o[1:])
               & ~(same_op & txn[1:]))
    del pred
    # the read just before is of a txn that moved nothing: the chain was taken back over it
    after = ~same_op & ~moves[:-1]
    after_id = ids_o[:-1]
    procs = proc_o[1:]                  # each link's process, ascending
    _resets(ctx, run, p, procs, ids, pr, cu, chained)
    _rebalance_cuts(ctx, run, p, procs, ids, pr, cu, chained)
    del proc_o, drain_o, procs
    # known offsets strictly between the two reads (a read_committed reader's: known_rc)
    known, known_rc, rc = plog.known, plog.known_rc, plog.rc
    off_o = off[order]
    left = plog.rank[order]             # every read's offset is known: its place there, not a search
    rank_p, rank_c = left[at_p] + 1, left[1:]
    if known_rc is not known:         # a read_committed read counts only the offsets it could see
        use = rc[cu]
        rc_p, rc_c = _ranks(known_rc, off_o, at_p)
        rank_p, rank_c = np.where(use, rc_p, rank_p), np.where(use, rc_c, rank_c)
    back = chained & (off_o[1:] <= off_o[at_p])
    gap = rank_c - rank_p
    skip = chained & ~back & (gap > 0)
    for typ, mask in (("nonmonotonic-poll", back), ("poll-skip", skip)):
        idx = np.flatnonzero(mask)
        out.count(typ, len(idx))
        for i in idx[_first_k([ids[cu[idx]], pos[cu[idx]]], k)]:
            a, b = pr[i], cu[i]
            extra: dict = {}
            wids = [ids[a], ids[b]]
            if after[i]:
                extra["after_txn"] = int(after_id[i])
                wids.append(after_id[i])
            if typ == "poll-skip":
                lo = rank_p[i]
                src = known_rc if rc[b] else known
                extra.update({"skipped": [int(x) for x in src[lo: lo + min(gap[i], SKIPPED_LIMIT)]],
                              "skipped_count": int(gap[i])})
            out.witness(typ, [p, ids[b], pos[b]], [off[a], off[b]], [val[a], val[b]], wids, extra=extra or None)


def _chain_order(ri: np.ndarray, proc: np.ndarray, drain: np.ndarray, ids: np.ndarray,
                 pos: np.ndarray) -> np.ndarray:
    """The reads ``ri`` in chain order, (process, drain, op, position): a process's
    reads of each kind come so in history order already (lexsort_grouped)."""
    o = lexsort_grouped([proc[ri], drain[ri]], ri, [ids, pos])
    return ri if o is None else ri[o]


def _ranks(known: np.ndarray, offs: np.ndarray, at_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each link (the read at ``at_p`` in chain order before the next
    one): how many of ``known`` lie at or below its first read's offset, and
    below its second's. One search of the reads in chain order, where offsets
    mostly rise (numpy's search narrows from the last key's place), not one
    per end of each link."""
    left = np.searchsorted(known, offs)
    right = left + (known[np.minimum(left, len(known) - 1)] == offs) if len(known) else left
    return right[at_p], left[1:]


def _resets(ctx: "Context", run: int, p: int, procs: np.ndarray, ids: np.ndarray, pr: np.ndarray,
            cu: np.ndarray, chained: np.ndarray) -> None:
    """Unchain the links across an assign or subscribe of their process (an ok
    assign naming p keeps p's chain: ``ctx.kept``)."""
    if not ctx.resets:
        return
    for q, at in _per_process(procs, chained):
        resets = ctx.resets.get((run, q))
        if resets is not None and ctx.kept:
            resets = resets[np.array([p not in ctx.kept.get((run, q, int(i)), ()) for i in resets], bool)]
        if resets is None or not len(resets):
            continue
        m = chained[at]          # a view: writes go to chained
        between = (np.searchsorted(resets, ids[cu[at]][m], "left")
                   - np.searchsorted(resets, ids[pr[at]][m], "right"))
        m[m] = between <= 0


def _rebalance_cuts(ctx: "Context", run: int, p: int, procs: np.ndarray, ids: np.ndarray, pr: np.ndarray,
                    cu: np.ndarray, chained: np.ndarray) -> None:
    """Unchain the links (a, b) of reads of p that a rebalance of p (lo, hi) cuts:
    a <= hi and b >= lo (groups.chain_cuts, reference.check_polls)."""
    if not ctx.rebalances:
        return
    for q, at in _per_process(procs, chained):
        cuts = [(lo, hi) for lo, hi, parts in ctx.rebalances.get((run, q), ()) if p in parts]
        if not cuts:
            continue
        cuts.sort(key=lambda c: c[1])
        his = np.array([hi for _, hi in cuts], np.int64)
        lows = np.minimum.accumulate(np.array([lo for lo, _ in cuts], np.int64)[::-1])[::-1]  # min lo from i on
        m = chained[at]          # a view: writes go to chained
        j = np.searchsorted(his, ids[pr[at]][m], "left")
        m[m] = ~((j < len(his)) & (lows[np.minimum(j, len(his) - 1)] <= ids[cu[at]][m]))


def _per_process(procs: np.ndarray, chained: np.ndarray) -> Iterator[tuple[int, slice]]:
    """(process, its slice) of each process with a chained link; ``procs`` is
    sorted (the links are in process order), so each is a slice, not a mask
    over every link: a run whose clients crash has a process per crash."""
    for q in dedup_sorted(procs[chained]):
        yield int(q), slice(int(np.searchsorted(procs, q, "left")), int(np.searchsorted(procs, q, "right")))
