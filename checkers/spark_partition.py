"""One Kafka partition's log, checked in one vectorised pass (numpy).

The Spark engine hands each (run, partition)'s messages, read from the
message index (history.message_index), to ``analyze_group`` (spark_frames.partition_results).
Why not Spark SQL windows: the
checks are ordered scans of a log (previous read of a consumer, earliest ack at
or above an offset, dense rank of known offsets), and Spark's WindowExec runs
about a million rows per second per window function on this machine, so the
SQL formulation cost ~30x a bare scan. numpy sorts and cumulative minima on a
partition's arrays cost a few times a scan. Every definition here is
reference.py's, per partition; the witness orders are the same.

Output rows (``OUT_SCHEMA``): ``what`` is "count" (n violations of ``type``),
"witness" (one of the first k witnesses of ``type`` in this partition), "stat"
(``type`` acknowledged / read, n), "lag" (``blob``: the realtime-lag samples,
int64 ns, sorted and packed: ``pack_sorted``), "losses" (every lost write: ``offsets``, -1 when unknown,
``values``, ``blob`` their ack times) or "inconsistent" (every inconsistent
offset, ``blob`` its earliest ack time or -1): the last two feed the election
step (``elections.judge``) that both engines share; "ack_times" (``blob``: every
acknowledged message's completion time, packed as "lag") feeds the progress step
(``progress_check.judge``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.arrays import _array, _bools, _np
from history.message_index import (ACK, DRAIN_READ_OP, FAIL, FAIL_SEND_OP, INFO_SEND_OP, OK_NO_OFFSET, OK_SEND_OP,
                                   READ, READ_OP, TXN_ABORTED, TXN_FAIL_OP, TXN_INFO_OP, TXN_OK_OP, TXN_OK_READ_OP,
                                   TXN_READ_OP, TXN_UNKNOWN)

from .spark_arrays import (_first_k, _groups, count_distinct, dedup_sorted, lexsort_grouped,
                           pack_sorted, rows_by, spans, unique)
from .spark_chains import poll_chains

OUT_SCHEMA = pa.schema([
    ("what", pa.string()), ("type", pa.string()), ("run", pa.int32()), ("partition", pa.int32()),
    ("n", pa.int64()), ("key", pa.list_(pa.int64())), ("offsets", pa.list_(pa.int64())),
    ("values", pa.list_(pa.int64())), ("ids", pa.list_(pa.int64())),
    ("extra", pa.string()), ("blob", pa.binary()),
])
OUT_DDL = ("what string, type string, run int, partition int, n bigint, key array<bigint>, "
           "offsets array<bigint>, values array<bigint>, ids array<bigint>, "
           "extra string, blob binary")


@dataclass
class Context:
    """What a partition needs from the rest of the history (small; shipped to workers)."""
    k: int
    resets: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)   # (run, process) -> sorted ids
    # (run, process, id) of an ok assign -> the partitions it names: their chains go on across it
    kept: dict[tuple[int, int, int], frozenset[int]] = field(default_factory=dict)
    drained: set[tuple[int, int]] = field(default_factory=set)                 # (run, partition)
    # (run, txn id) -> partitions a rebalance named right after it (txn.rebalanced)
    rebalanced: dict[tuple[int, int], frozenset[int]] = field(default_factory=dict)
    # (run, process) -> rebalances (lo, hi, partitions): each ends the chains of those partitions,
    # and their reads in ops lo..hi (the op it follows, groups.py) belong to no chain
    rebalances: dict[tuple[int, int], list[tuple[int, int, frozenset[int]]]] = field(default_factory=dict)
    # run -> (ids of info txns settled committed, of those settled aborted), sorted (settle.py)
    settled: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def settled_kinds(op_kind: np.ndarray, ids: np.ndarray, committed: np.ndarray, aborted: np.ndarray) -> np.ndarray:
    """The kinds the checks judge by: a settled info txn's writes and reads as a
    committed txn's (TXN_OK_OP, TXN_OK_READ_OP) or its writes as an aborted one's."""
    op_kind = op_kind.copy()
    ok, bad = np.isin(ids, committed), np.isin(ids, aborted)
    op_kind[ok & (op_kind == TXN_INFO_OP)] = TXN_OK_OP
    op_kind[ok & (op_kind == TXN_READ_OP)] = TXN_OK_READ_OP
    op_kind[bad & (op_kind == TXN_INFO_OP)] = TXN_FAIL_OP
    return op_kind


class Out:
    def __init__(self, run: int, partition: int):
        self.run, self.partition = run, partition
        self.rows: list[dict[str, Any]] = []

    def count(self, typ: str, n: int) -> None:
        self.rows.append({"what": "count", "type": typ, "n": int(n)})

    def witness(self, typ: str, key: list, offsets: list, values: list, ids: list,
                extra: dict | None = None) -> None:
        self.rows.append({"what": "witness", "type": typ, "key": [int(x) for x in key],
                          "offsets": [int(x) for x in offsets], "values": [int(x) for x in values],
                          "ids": [int(x) for x in ids],
                          "extra": json.dumps(extra) if extra else None})

    def table(self) -> pa.Table:
        for r in self.rows:
            r["run"], r["partition"] = self.run, self.partition
        return pa.Table.from_pylist(self.rows, schema=OUT_SCHEMA)


class Reads(NamedTuple):
    """What lost and phantom ask of a partition's reads: every value read, ascending;
    the highest offset read and the lowest op that read it."""
    vals: np.ndarray
    max_off: int | None
    max_reader: int | None


class PartitionLog:
    """One (run, partition): its messages as arrays, and the indexes the checks share."""

    def __init__(self, run: int, partition: int, t: pa.Table, ctx: Context):
        self.ctx, self.k = ctx, ctx.k
        self.run, self.p = run, partition
        self.out = Out(self.run, self.p)
        # one row per message (spark_scan.MESSAGE_SCHEMA); the columns are read-only views of Arrow buffers
        offs = t["offset"]
        self.has_off = (_bools(offs.is_valid()) if offs.null_count else np.ones(len(offs), bool))
        self.off, self.val = _np(t["offset"]), _np(t["value"])
        self.pos = _np(t["pos"])            # int32: only compared, sorted and reported
        self.ids, self.proc = _np(t["id"]), _np(t["process"], -1).astype(np.int64, copy=False)
        self._producer = t["producer"]          # for the acks' senders (acks)
        self.t_inv, self.t_done = _np(t["t_inv"]), _np(t["t_done"], -1)
        op_kind = _np(t["kind"]).astype(np.int8, copy=False)
        if run in ctx.settled:
            op_kind = settled_kinds(op_kind, self.ids, *ctx.settled[run])
        self.op_kind = op_kind
        self.drain = op_kind == DRAIN_READ_OP
        self.txn_w = (op_kind >= TXN_OK_OP) & (op_kind <= TXN_INFO_OP)
        self.txn_r = op_kind >= TXN_OK_READ_OP
        self.rc = _bools(t["rc"], True)
        kind = np.where((op_kind == READ_OP) | self.drain | self.txn_r, READ, op_kind).astype(np.int8)
        kind[(op_kind == OK_SEND_OP) & ~self.has_off] = OK_NO_OFFSET
        kind[((op_kind == INFO_SEND_OP) | (op_kind == FAIL_SEND_OP)) & self.has_off] = ACK   # acked in a mixed send
        kind[op_kind == TXN_OK_OP] = np.where(self.has_off[op_kind == TXN_OK_OP], ACK, OK_NO_OFFSET)
        kind[op_kind == TXN_FAIL_OP] = TXN_ABORTED
        kind[op_kind == TXN_INFO_OP] = TXN_UNKNOWN
        self.kind = kind
        self.ack, self.read = kind == ACK, kind == READ
        obs = self.ack | self.read
        # The acks and reads by offset, stably (history order within one), and their offsets so:
        # offsets() groups them (and drops them), and known and each one's place in it come from them.
        by_off = rows_by(self.off, obs)
        so = self.off[by_off]
        self._by_off = (by_off, so)
        new = np.empty(len(so), bool)
        new[:1] = True
        np.not_equal(so[1:], so[:-1], out=new[1:])
        self.known = so[new]
        # known[rank[i]] == off[i] for every ack and read i (0 elsewhere): how polls rank reads
        rank = np.cumsum(new, dtype=np.int32 if len(new) < 1 << 31 else np.int64)
        rank -= 1
        self.rank = np.zeros(len(self.off), rank.dtype)
        self.rank[by_off] = rank
        del rank, new
        # what a read_committed consumer sees: not offsets known only from aborted or info txns' values
        hidden = self.val[(kind == TXN_ABORTED) | (kind == TXN_UNKNOWN)]
        self.known_rc = (unique(self.off[obs & ~np.isin(self.val, hidden)], "stable") if len(hidden)
                         else self.known)

    @cached_property
    def reads(self) -> Reads:
        """The values read; the highest offset read and its first reader. (Each value's
        first reader and lowest offset, which phantom names, only for its witnesses.)"""
        ro = self.off[self.read]
        max_off = int(ro.max()) if len(ro) else None
        max_reader = int(self.ids[self.read][ro == max_off].min()) if len(ro) else None
        return Reads(unique(self.val[self.read], "stable"), max_off, max_reader)

    def _pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct (offset, value) of ``rows``, in that order, each with its lowest op."""
        oo, ov, oid = self.off[rows], self.val[rows], self.ids[rows]
        order = np.lexsort((oid, ov, oo))
        oo, ov, oid = oo[order], ov[order], oid[order]
        s, _ = _groups([oo, ov])
        return oo[s], ov[s], oid[s]

    def offsets(self) -> None:
        """inconsistent-offset, order (partition, offset); duplicate, order (partition, value).
        Which offsets (values) are bad takes a sort by offset (value) alone: a group
        has two values (offsets) iff two neighbours differ. The (offset, value, op)
        order the witnesses need is then only of the bad groups' rows."""
        obs = self.ack | self.read
        by_off, so = self.__dict__.pop("_by_off", (None, None))
        if by_off is None:
            by_off = rows_by(self.off, obs)
            so = self.off[by_off]
        p, k, out = self.p, self.k, self.out
        sv = self.val[by_off]
        two = np.flatnonzero((so[1:] == so[:-1]) & (sv[1:] != sv[:-1]))
        del sv
        inc = dedup_sorted(so[two + 1])             # every inconsistent offset, ascending
        lo, hi = np.searchsorted(so, inc, "left"), np.searchsorted(so, inc, "right")
        del so
        out.count("inconsistent-offset", len(inc))
        pov_o, pov_v, pov_first = self._pairs(by_off[spans(lo[:k], hi[:k])])
        gs, ge = _groups([pov_o])
        for a, b in zip(gs, ge):
            out.witness("inconsistent-offset", [p, pov_o[a]], [pov_o[a]], pov_v[a:b], pov_first[a:b])
        # every inconsistent offset and its earliest ack time (-1: none), for the election step
        rows = by_off[spans(lo, hi)]
        acked = self.ack[rows]
        at, grp = self.t_done[rows[acked]], np.repeat(np.arange(len(inc)), hi - lo)[acked]
        first = np.full(len(inc), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first, grp, at)
        first[np.bincount(grp, minlength=len(inc)) == 0] = -1
        self.out.rows.append({"what": "inconsistent", "offsets": inc.tolist(), "blob": first.tobytes()})
        del by_off, rows
        by_val = rows_by(self.val, obs)
        sv, so = self.val[by_val], self.off[by_val]
        two = np.flatnonzero((sv[1:] == sv[:-1]) & (so[1:] != so[:-1]))
        del so
        dup = dedup_sorted(sv[two + 1])              # every value at two offsets, ascending
        out.count("duplicate", len(dup))
        lo, hi = np.searchsorted(sv, dup[:k], "left"), np.searchsorted(sv, dup[:k], "right")
        for a, b in zip(lo, hi):
            do, dv, df = self._pairs(by_val[a:b])
            out.witness("duplicate", [p, dv[0]], do, [dv[0]], df)

    def lost(self) -> None:
        """lost-write / unseen: ok sends never read; order (partition, value, op, position)."""
        ki = np.flatnonzero((self.kind == ACK) | (self.kind == OK_NO_OFFSET))
        kv, ktxn, rd = self.val[ki], self.txn_w[ki], self.reads
        dc = (self.run, self.p) in self.ctx.drained
        if dc:
            # The completed drain is what survived: missing from it is lost, read before or not.
            lost = ~np.isin(kv, self.val[self.read & self.drain])
            unseen = np.zeros(len(kv), bool)
        else:
            unread = ~np.isin(kv, rd.vals)
            reached = (self.has_off[ki] & (self.off[ki] <= rd.max_off) if rd.max_off is not None
                       else np.zeros(len(kv), bool))
            lost, unseen = unread & reached, unread & ~reached
        extra = {"max_read_offset": rd.max_off, "drain_complete": dc}
        ids, pos, off, val = self.ids, self.pos, self.off, self.val
        for typ, mask in (("lost-write", lost & ~ktxn), ("unseen", unseen), ("lost-txn-write", lost & ktxn)):
            rows = ki[mask]
            self.out.count(typ, len(rows))
            for i in rows[_first_k([val[rows], ids[rows], pos[rows]], self.k)]:
                wids = [ids[i]] + ([rd.max_reader] if typ == "lost-write" and rd.max_reader is not None else [])
                self.out.witness(typ, [self.p, val[i], ids[i], pos[i]], [off[i]] if self.has_off[i] else [], [val[i]],
                                 wids, extra=extra)
        # every lost write (offset -1: none known) and its ack time, for the election step
        li = ki[lost]
        self.out.rows.append({"what": "losses", "offsets": np.where(self.has_off[li], off[li], -1).tolist(),
                              "values": val[li].tolist(), "blob": self.t_done[li].astype(np.int64).tobytes()})
        self.out.rows.append({"what": "stat", "type": "acknowledged", "n": count_distinct(kv, "stable")})
        self.out.rows.append({"what": "stat", "type": "read", "n": int(len(rd.vals))})

    def phantom(self) -> None:
        """Failed sends whose value was read; order (partition, value, op, position)."""
        fm = self.kind == FAIL
        fv, fid, fpos = self.val[fm], self.ids[fm], self.pos[fm]
        rv = self.reads.vals
        j = np.searchsorted(rv, fv)
        hit = (j < len(rv)) & (rv[np.minimum(j, len(rv) - 1)] == fv) if len(rv) else np.zeros(len(fv), bool)
        idx = np.flatnonzero(hit)
        self.out.count("phantom-write", len(idx))
        wit = idx[_first_k([fv[idx], fid[idx], fpos[idx]], self.k)]
        rows = np.flatnonzero(self.read & np.isin(self.val, fv[wit])) if len(wit) else wit
        for i in wit:               # the value's lowest offset read and first reader
            r = rows[self.val[rows] == fv[i]]
            self.out.witness("phantom-write", [self.p, fv[i], fid[i], fpos[i]], [self.off[r].min()], [fv[i]],
                             [fid[i], self.ids[r].min()])

    def senders(self, rows: np.ndarray) -> np.ndarray:
        """The sender of each of ``rows``: its producer if any (a pipelined
        producer's sends keep order per producer, reference.sender), as a code
        below -1, clear of every process number; else its process. Codes in
        order of the producers' first messages of the partition."""
        col = self._producer
        if col.null_count == len(col):
            return self.proc[rows]
        codes = pc.dictionary_encode(_array(col)).indices
        code = _np(codes.take(pa.array(rows)), -1)
        sender = self.proc[rows]
        np.subtract(-2, code, out=sender, where=code >= 0)
        return sender

    def acks(self) -> None:
        a = np.flatnonzero(self.ack)
        _acks(self.out, self.p, a, self.off, self.val, self.ids, self.pos, self.senders(a), self.t_inv, self.t_done,
              self.k)

    def lag(self) -> None:
        _lag(self.out, self.off[self.ack], self.t_done[self.ack], self.read & ~self.drain & ~self.txn_r, self.off,
             self.ids, self.pos, self.t_inv)

    def ack_times(self) -> None:
        """Every acknowledged message's completion time, for the per-fault
        progress step both engines share (checkers/progress_check.py)."""
        self.out.rows.append({"what": "ack_times", "blob": pack_sorted(self.t_done[self.ack])})

    def polls(self) -> None:
        poll_chains(self)

    def txn_reads(self) -> None:
        from .spark_txn import txn_reads
        txn_reads(self)

    def txn_internal(self) -> None:
        from .spark_txn import txn_internal
        txn_internal(self)

    def txn_edges(self) -> None:
        from .spark_txn import txn_edges
        txn_edges(self)


# name -> (method, anomaly types it decides)
CHECKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "offsets": ("offsets", ("inconsistent-offset", "duplicate")),
    "lost": ("lost", ("lost-write", "unseen", "lost-txn-write")),
    "phantom": ("phantom", ("phantom-write",)),
    "acks": ("acks", ("nonlinearizable-offset", "nonmonotonic-send")),
    "polls": ("polls", ("nonmonotonic-poll", "poll-skip")),
    "lag": ("lag", ()),
    "ack-times": ("ack_times", ()),
    "txn-reads": ("txn_reads", ("aborted-read", "precommitted-read")),
    "txn-internal": ("txn_internal", ("int-poll-skip", "int-nonmonotonic-poll", "int-nonmonotonic-send",
                                      "int-send-skip")),
    # ww/wr edges for the cycle search on the driver (spark_txn.finish)
    "txn-edges": ("txn_edges", ("G0", "G0-process", "G0-realtime", "G1c", "G1c-process", "G1c-realtime")),
}
ALL_TYPES = tuple(t for _, ts in CHECKS.values() for t in ts)


def analyze_group(key: tuple, t: pa.Table, ctx: Context) -> pa.Table:
    """All message-level checks for one (run, partition) (``key``, as Arrow
    scalars). A check that raises reports an "error" row instead, and the
    others still run."""
    run, partition = int(key[0].as_py()), int(key[1].as_py())
    try:
        plog = PartitionLog(run, partition, t, ctx)
    except Exception as e:  # noqa: BLE001 - reported, never a pass
        out = Out(run, partition)
        out.rows.append({"what": "error", "type": "partition", "extra": f"{type(e).__name__}: {e}"})
        return out.table()
    for name, (method, _) in CHECKS.items():
        mark = len(plog.out.rows)
        try:
            getattr(plog, method)()
        except Exception as e:  # noqa: BLE001
            del plog.out.rows[mark:]
            plog.out.rows.append({"what": "error", "type": name, "extra": f"{type(e).__name__}: {e}"})
    return plog.out.table()


def _acks(out: Out, p: int, a: np.ndarray, off: np.ndarray, val: np.ndarray, ids: np.ndarray, pos: np.ndarray,
          aproc: np.ndarray, t_inv: np.ndarray, t_done: np.ndarray, k: int) -> None:
    """nonlinearizable-offset and nonmonotonic-send of the acks (rows ``a``;
    ``aproc``: each one's sender, its producer or process); order (partition,
    op, position). Columns are taken for the acks as each step needs them, not
    all at once: 71 MB each at 9M acks."""
    # earliest completion among acks at or above each ack's offset: a suffix minimum in offset
    # order (the acks' own order, mostly), taken at the first ack of each offset
    ao, at = off[a], t_done[a]
    asc = None if (ao[1:] >= ao[:-1]).all() else np.argsort(ao, kind="stable")
    so, st = (ao, at) if asc is None else (ao[asc], at[asc])
    first_t = np.minimum.accumulate(st[::-1])[::-1]
    if (so[1:] == so[:-1]).any():
        first_t = first_t[np.maximum.accumulate(np.where(np.r_[True, so[1:] != so[:-1]], np.arange(len(so)), 0))]
    del so, st
    hit = np.flatnonzero(first_t < t_inv[a if asc is None else a[asc]])
    idx, first_t = (hit, first_t[hit]) if asc is None else (asc[hit], first_t[hit])
    o = np.argsort(idx)
    idx, first_t = idx[o], first_t[o]                   # indexes into a, ascending
    out.count("nonlinearizable-offset", len(idx))
    for j in _first_k([ids[a[idx]], pos[a[idx]]], k):
        i = a[idx[j]]
        cand = a[np.flatnonzero((ao >= off[i]) & (at == first_t[j]))]
        c = cand[np.lexsort((val[cand], off[cand], ids[cand]))[0]]
        out.witness("nonlinearizable-offset", [p, ids[i], pos[i]], [off[c], off[i]], [val[c], val[i]],
                    [ids[c], ids[i]])
    del at
    # successive acks of one sender
    order = lexsort_grouped([aproc], a, [ids, pos])
    so, sproc = (ao, aproc) if order is None else (ao[order], aproc[order])
    prev = np.flatnonzero((sproc[1:] == sproc[:-1]) & (so[1:] <= so[:-1]))
    out.count("nonmonotonic-send", len(prev))
    cur, pr = (prev + 1, prev) if order is None else (order[prev + 1], order[prev])
    cur, pr = a[cur], a[pr]
    for j in _first_k([ids[cur], pos[cur]], k):
        c, q = cur[j], pr[j]
        out.witness("nonmonotonic-send", [p, ids[c], pos[c]], [off[q], off[c]], [val[q], val[c]], [ids[q], ids[c]])


def _lag(out: Out, ao: np.ndarray, at: np.ndarray, lagm: np.ndarray, off: np.ndarray, ids: np.ndarray,
         pos: np.ndarray, t_inv: np.ndarray) -> None:
    """Realtime lag at each non-drain poll's last read of the partition."""
    li = np.flatnonzero(lagm)
    order = li[np.lexsort((pos[li], ids[li]))]
    last = order[np.append(ids[order][1:] != ids[order][:-1], True)] if len(order) else order
    asc = np.argsort(ao, kind="stable")
    ao_s, at_s = ao[asc], at[asc]
    suffix = np.minimum.accumulate(at_s[::-1])[::-1] if len(at_s) else at_s
    j = np.searchsorted(ao_s, off[last], side="right")
    has = j < len(ao_s)
    e = np.where(has, suffix[np.minimum(j, max(len(suffix) - 1, 0))] if len(suffix) else 0, 0)
    lags = np.where(has, np.maximum(0, t_inv[last] - e), 0).astype(np.int64)
    out.rows.append({"what": "lag", "blob": pack_sorted(lags)})
