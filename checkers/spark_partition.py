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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.arrays import _array, _bools, _np
from history.message_index import (ACK, DRAIN_READ_OP, FAIL, FAIL_SEND_OP, INFO_SEND_OP, OK_NO_OFFSET, OK_SEND_OP,
                                   READ, READ_OP, TXN_ABORTED, TXN_FAIL_OP, TXN_INFO_OP, TXN_OK_OP, TXN_OK_READ_OP,
                                   TXN_READ_OP, TXN_UNKNOWN)

from .spark_arrays import _first_k, _groups, unique
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


_ZSTD = pa.Codec("zstd", 1)


def pack_sorted(a: np.ndarray) -> bytes:
    """int64 samples sorted and compressed, with their count first: a 10M-op
    history's lag samples, 27 MB raw on their way to the driver, are 0.3 MB."""
    a = np.sort(a.astype(np.int64))
    return np.int64(len(a)).tobytes() + _ZSTD.compress(a.tobytes(), asbytes=True)


def unpack_sorted(b: bytes) -> np.ndarray:
    n = int(np.frombuffer(b[:8], np.int64)[0])
    return np.frombuffer(_ZSTD.decompress(b[8:], decompressed_size=8 * n, asbytes=True), np.int64)


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


class PartitionLog:
    """One (run, partition): its messages as arrays, and the indexes the checks share."""

    def __init__(self, run: int, partition: int, t: pa.Table, ctx: Context):
        self.ctx, self.k = ctx, ctx.k
        self.run, self.p = run, partition
        self.out = Out(self.run, self.p)
        # one row per message (spark_scan.MESSAGE_SCHEMA)
        t = t.combine_chunks()
        offs = t["offset"]
        self.has_off = (_bools(offs.is_valid()) if offs.null_count else np.ones(len(offs), bool))
        self.off, self.val = _np(offs), _np(t["value"])
        self.pos = _np(t["pos"]).astype(np.int64)
        self.ids, self.proc = _np(t["id"]), _np(t["process"], -1).astype(np.int64)
        self.sender = self.proc
        if t["producer"].null_count < len(t):
            # a pipelined producer's sends keep order per producer (reference.sender):
            # producer codes below -1, clear of every process number
            code = _np(pc.dictionary_encode(_array(t["producer"])).indices, -1).astype(np.int64)
            self.sender = np.where(code >= 0, -2 - code, self.proc)
        self.t_inv, self.t_done = _np(t["t_inv"]), _np(t["t_done"], -1)
        op_kind = _np(t["kind"]).astype(np.int8)
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
        self.known = unique(self.off[obs])
        # what a read_committed consumer sees: not offsets known only from aborted or info txns' values
        hidden = self.val[(kind == TXN_ABORTED) | (kind == TXN_UNKNOWN)]
        self.known_rc = unique(self.off[obs & ~np.isin(self.val, hidden)]) if len(hidden) else self.known
        # reads by value: first reader, lowest offset read; highest offset read and its first reader
        rv, ro, rid = self.val[self.read], self.off[self.read], self.ids[self.read]
        order = np.argsort(rv, kind="stable")
        gs, _ = _groups([rv[order]])
        self.read_vals = rv[order][gs]
        self.first_reader = np.minimum.reduceat(rid[order], gs) if len(gs) else np.zeros(0, np.int64)
        self.low_off = np.minimum.reduceat(ro[order], gs) if len(gs) else np.zeros(0, np.int64)
        self.max_off = int(ro.max()) if len(ro) else None
        self.max_reader = int(rid[ro == self.max_off].min()) if len(ro) else None

    def offsets(self) -> None:
        """inconsistent-offset, order (partition, offset); duplicate, order (partition, value)."""
        obs = self.ack | self.read
        oo, ov, oid = self.off[obs], self.val[obs], self.ids[obs]
        order = np.lexsort((oid, ov, oo))
        s, _ = _groups([oo[order], ov[order]])
        pov_o, pov_v, pov_first = oo[order][s], ov[order][s], oid[order][s]
        p, k, out = self.p, self.k, self.out
        gs, ge = _groups([pov_o])
        bad = np.flatnonzero(ge - gs > 1)
        out.count("inconsistent-offset", len(bad))
        for g in bad[:k]:
            out.witness("inconsistent-offset", [p, pov_o[gs[g]]], [pov_o[gs[g]]], pov_v[gs[g]:ge[g]],
                        pov_first[gs[g]:ge[g]])
        # every inconsistent offset and its earliest ack time (-1: none), for the election step
        inc = pov_o[gs[bad]]
        first = np.full(len(inc), -1, np.int64)
        if len(inc):        # by slices of the acks in offset order: a bad election can leave thousands
            ao, at = self.off[self.ack], self.t_done[self.ack]
            o = np.argsort(ao, kind="stable")
            ao, at = ao[o], at[o]
            lo, hi = np.searchsorted(ao, inc, "left"), np.searchsorted(ao, inc, "right")
            first = np.array([at[a:b].min() if b > a else -1 for a, b in zip(lo, hi)], np.int64)
        self.out.rows.append({"what": "inconsistent", "offsets": inc.tolist(), "blob": first.tobytes()})
        o2 = np.lexsort((pov_o, pov_v))
        dv, do, df = pov_v[o2], pov_o[o2], pov_first[o2]
        gs, ge = _groups([dv])
        bad = np.flatnonzero(ge - gs > 1)
        out.count("duplicate", len(bad))
        for g in bad[:k]:
            out.witness("duplicate", [p, dv[gs[g]]], do[gs[g]:ge[g]], [dv[gs[g]]], df[gs[g]:ge[g]])

    def lost(self) -> None:
        """lost-write / unseen: ok sends never read; order (partition, value, op, position)."""
        okm = (self.kind == ACK) | (self.kind == OK_NO_OFFSET)
        kv, ko, kho, kid, kpos = self.val[okm], self.off[okm], self.has_off[okm], self.ids[okm], self.pos[okm]
        ktxn = self.txn_w[okm]
        unread = ~np.isin(kv, self.read_vals)
        dc = (self.run, self.p) in self.ctx.drained
        reached = kho & (ko <= self.max_off) if self.max_off is not None else np.zeros(len(kv), bool)
        if dc:
            # The completed drain is what survived: missing from it is lost, read before or not.
            lost = ~np.isin(kv, self.val[self.read & self.drain])
            unseen = np.zeros(len(kv), bool)
        else:
            lost, unseen = unread & reached, unread & ~reached
        extra = {"max_read_offset": self.max_off, "drain_complete": dc}
        for typ, mask in (("lost-write", lost & ~ktxn), ("unseen", unseen), ("lost-txn-write", lost & ktxn)):
            idx = np.flatnonzero(mask)
            self.out.count(typ, len(idx))
            for i in idx[_first_k([kv[idx], kid[idx], kpos[idx]], self.k)]:
                wids = [kid[i]] + ([self.max_reader] if typ == "lost-write" and self.max_reader is not None
                                   else [])
                self.out.witness(typ, [self.p, kv[i], kid[i], kpos[i]], [ko[i]] if kho[i] else [], [kv[i]],
                                 wids, extra=extra)
        # every lost write (offset -1: none known) and its ack time, for the election step
        self.out.rows.append({"what": "losses", "offsets": np.where(kho, ko, -1)[lost].tolist(),
                              "values": kv[lost].tolist(),
                              "blob": self.t_done[okm][lost].astype(np.int64).tobytes()})
        self.out.rows.append({"what": "stat", "type": "acknowledged", "n": int(len(unique(kv)))})
        self.out.rows.append({"what": "stat", "type": "read", "n": int(len(self.read_vals))})

    def phantom(self) -> None:
        """Failed sends whose value was read; order (partition, value, op, position)."""
        fm = self.kind == FAIL
        fv, fid, fpos = self.val[fm], self.ids[fm], self.pos[fm]
        rv = self.read_vals
        j = np.searchsorted(rv, fv)
        hit = (j < len(rv)) & (rv[np.minimum(j, len(rv) - 1)] == fv) if len(rv) else np.zeros(len(fv), bool)
        idx = np.flatnonzero(hit)
        self.out.count("phantom-write", len(idx))
        for i in idx[_first_k([fv[idx], fid[idx], fpos[idx]], self.k)]:
            self.out.witness("phantom-write", [self.p, fv[i], fid[i], fpos[i]], [self.low_off[j[i]]], [fv[i]],
                             [fid[i], self.first_reader[j[i]]])

    def acks(self) -> None:
        a = self.ack
        _acks(self.out, self.p, self.off[a], self.val[a], self.ids[a], self.pos[a], self.sender[a],
              self.t_inv[a], self.t_done[a], self.k)

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


def _acks(out: Out, p: int, ao: np.ndarray, av: np.ndarray, aid: np.ndarray, apos: np.ndarray,
          aproc: np.ndarray, ainv: np.ndarray, at: np.ndarray, k: int) -> None:
    """nonlinearizable-offset and nonmonotonic-send (``aproc``: each ack's
    sender, its producer or process); order (partition, op, position)."""
    # earliest completion among acks at or above each ack's offset
    desc = np.argsort(-ao, kind="stable")
    cm = np.minimum.accumulate(at[desc]) if len(desc) else at
    gs, ge = _groups([ao[desc]])
    first_t = np.empty(len(ao), np.int64)
    first_t[desc] = np.repeat(cm[ge - 1], ge - gs)
    idx = np.flatnonzero(first_t < ainv)
    out.count("nonlinearizable-offset", len(idx))
    for i in idx[_first_k([aid[idx], apos[idx]], k)]:
        cand = np.flatnonzero((ao >= ao[i]) & (at == first_t[i]))
        a = cand[np.lexsort((av[cand], ao[cand], aid[cand]))[0]]
        out.witness("nonlinearizable-offset", [p, aid[i], apos[i]], [ao[a], ao[i]], [av[a], av[i]],
                    [aid[a], aid[i]])
    # successive acks of one sender
    order = np.lexsort((apos, aid, aproc))
    so, sproc = ao[order], aproc[order]
    same = sproc[1:] == sproc[:-1]
    prev = np.flatnonzero(same & (so[1:] <= so[:-1]))
    out.count("nonmonotonic-send", len(prev))
    cur = order[prev + 1]
    pr = order[prev]
    for j in _first_k([aid[cur], apos[cur]], k):
        c, q = cur[j], pr[j]
        out.witness("nonmonotonic-send", [p, aid[c], apos[c]], [ao[q], ao[c]], [av[q], av[c]],
                    [aid[q], aid[c]])


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
