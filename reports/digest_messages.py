"""The digest's figures of messages, kept per Kafka partition: acknowledged writes, first reads, poll positions.

Two sources feed them, both in history order within a partition: the
``messages`` column of history.parquet, flattened a slice at a time
(``DigestBuilder._messages``, which hands each partition its piece), or the
message index beside it (``history.message_index``: one (run, partition)'s
messages per row group, flat columns), read a partition at a time
(``index_partitions``), which spares flattening the nested column and holds
one partition's reads at a time.

Partitions are few, so each keeps its own figures as they come: nothing is
sorted by partition at the end. Of a read only its value's first read time
matters (``Acks.seen``), so reads are reduced as they come (``FirstReads``)
rather than kept whole until the end.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from history.message_index import (DRAIN_READ_OP, FAIL_SEND_OP, INDEX_SCHEMA, INFO_SEND_OP, NO_PARTITION,
                                   OK_SEND_OP, READ_OP, TXN_FAIL_OP, TXN_INFO_OP, TXN_OK_OP, index_is_current)

from .columns import Column, bools, numpy_of

# per message, what the digest makes of it (the ``code`` of ``Partition.add``)
OTHER, ACK, POSITION_READ, READ = 0, 1, 2, 3
NEVER = np.iinfo(np.int64).max
TABLE_AT, PIECES_AT = 4, 8   # FirstReads: a table once values span <= 4 slots a read; pieces again past 8
INDEX_COLUMNS = ["id", "pos", "kind", "t_inv", "t_done", "offset", "value"]
_CODE = np.zeros(256, np.int8)          # index kind (as uint8) -> code
_CODE[OK_SEND_OP], _CODE[READ_OP], _CODE[DRAIN_READ_OP] = ACK, POSITION_READ, READ
_WRITE = np.zeros(256, bool)            # the kinds of an op that may have acknowledged a write
_WRITE[[OK_SEND_OP, FAIL_SEND_OP, INFO_SEND_OP, TXN_OK_OP, TXN_FAIL_OP, TXN_INFO_OP]] = True


@dataclass
class Acks:
    """One partition's acknowledged sends (messages of ok sends), in history order."""
    t: np.ndarray          # ack time, s since the harness started
    offset: np.ndarray     # int64
    value: np.ndarray      # int64
    seen: np.ndarray       # the first time (s) a poll, drain included, returned the value; NaN: never

    def __len__(self) -> int:
        return len(self.t)


def _reduce(v: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, sorted; the least time of each). Reads come nearly
    in value order (a drain's in offset order): often no sort is needed."""
    if len(v) > 1 and not (v[1:] >= v[:-1]).all():
        order = np.argsort(v, kind="stable")
        v, t = v[order], t[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    return v[starts], np.minimum.reduceat(t, starts)


class FirstReads:
    """One partition's reads, reduced as they come to the first (least) time
    each value was read: sorted (value, time) pieces, one per batch of reads
    (16 bytes a distinct value); or, once the values read span at most
    TABLE_AT slots a read (the workload's values are sequence numbers), a
    table indexed by value (8 bytes a slot of the span), which needs no sort:
    on a long history the pieces' final sort was most of the digest's finish.
    The table holds NEVER minus the time, so that a slot never read is 0: it
    is allocated zeroed, and its room above the values read takes no memory.
    Times must then not be negative (else pieces); a read at exactly 2**63-1
    ns (292 years) would count as none."""

    def __init__(self) -> None:
        self._pieces: list[tuple[np.ndarray, np.ndarray]] = []
        self._table: np.ndarray | None = None
        self._base = 0                          # the value of the table's slot 0
        self._span = (0, -1)                    # the least and greatest value read
        self._reads = 0
        self._negative = False                  # a time < 0 was read: pieces only

    def add(self, v: np.ndarray, t: np.ndarray) -> None:
        if not len(v):
            return
        self._negative = self._negative or bool(t.min() < 0)
        lo, hi = int(v.min()), int(v.max())
        if self._reads:
            lo, hi = min(lo, self._span[0]), max(hi, self._span[1])
        self._reads += len(v)
        wide = hi - lo + 1
        if self._table is not None:
            if not self._negative and wide <= PIECES_AT * self._reads:
                if lo < self._base or hi >= self._base + len(self._table):
                    self._move(lo, wide)
                self._span = (lo, hi)
                np.maximum.at(self._table, v - self._base, NEVER - t)
                return
            k = np.flatnonzero(self._table)
            self._pieces, self._table = [(k + self._base, NEVER - self._table[k])], None
        self._span = (lo, hi)
        self._pieces.append(_reduce(v, t))
        if not self._negative and wide <= TABLE_AT * self._reads:
            self._move(lo, wide)
            for pv, pt in self._pieces:
                np.maximum.at(self._table, pv - self._base, NEVER - pt)
            self._pieces = []

    def _move(self, lo: int, wide: int) -> None:
        """A table from ``lo`` with room for ``wide`` values and up to three
        times as many above (values mostly rise; room not written to takes no
        memory, but address space: at most 2 * PIECES_AT slots a read), holding
        what the old one did (the span read so far: one copy)."""
        table = np.zeros(max(wide, min(4 * wide, 2 * PIECES_AT * self._reads)), np.int64)
        if self._table is not None:
            a, b = self._span[0] - self._base, self._span[1] - self._base + 1
            table[a + self._base - lo:b + self._base - lo] = self._table[a:b]
        self._base, self._table = lo, table

    def seen(self, values: np.ndarray) -> np.ndarray:
        """The first read time (s) of each of ``values``; NaN: never read."""
        if self._table is not None:
            k = values - self._base
            inside = (k >= 0) & (k < len(self._table))
            if inside.all():        # (as nearly always: fewer passes over every ack)
                enc = self._table[k]
                del k
                never = enc == 0
                np.subtract(NEVER, enc, out=enc)
                out = np.divide(enc, 1e9)
                out[never] = np.nan
                return out
            out = np.full(len(values), np.nan)
            enc = self._table[k[inside]]
            hit = enc != 0
            out[np.flatnonzero(inside)[hit]] = (NEVER - enc[hit]) / 1e9
            return out
        out = np.full(len(values), np.nan)
        if self._pieces:
            v, t = self._pieces[0] if len(self._pieces) == 1 else _reduce(
                np.concatenate([p[0] for p in self._pieces]), np.concatenate([p[1] for p in self._pieces]))
            k = np.minimum(np.searchsorted(v, values), len(v) - 1)
            hit = v[k] == values
            out[hit] = t[k[hit]] / 1e9
        return out


class Partition:
    """One partition's acks, positions and first reads. ``capacity``: a bound
    on its acks, when known; ``ids``: keep the op id of each position (the
    message index's way, which learns only later which polls had no invoke)."""

    def __init__(self, capacity: int = 0, ids: bool = False) -> None:
        self.acks = (Column(float, capacity), Column(np.int64, capacity), Column(np.int64, capacity))
        self.positions: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
        self.reads = FirstReads()
        self._ids = ids

    def add(self, code: np.ndarray, has_off: np.ndarray, op: np.ndarray, pos: np.ndarray, t_inv: np.ndarray,
            t_done: np.ndarray, off: np.ndarray, val: np.ndarray) -> None:
        """Messages of this partition in history order, per message: ``code``
        (ACK: of an ok send; POSITION_READ: of a non-drain ok poll (with an
        invoke, unless ``ids``); READ: of another ok poll), whether it has an
        offset, its op (any id of it; with ``ids`` its invoke index) and place
        in the op's list, the op's invoke and completion times (ns), offset
        and value (nulls 0). An op's messages must not be split between
        calls: a poll's position is the last record of each run of this
        partition in its list."""
        a = (code == ACK) & has_off
        if a.any():
            for col, x in zip(self.acks, (t_done[a] / 1e9, off[a], val[a])):
                col.append(x)
        r = code >= POSITION_READ
        if r.any():
            self.reads.add(val[r], t_done[r])
        q = np.flatnonzero(code == POSITION_READ)
        if len(q):
            o, s = op[q], pos[q]
            q = q[np.r_[(o[1:] != o[:-1]) | (s[1:] != s[:-1] + 1), True]]
            self.positions[0].append(t_inv[q] / 1e9)
            self.positions[1].append(off[q])
            if self._ids:
                self.positions[2].append(op[q])

    def take_acks(self) -> Acks | None:
        """Its Acks (None: none); its reads are let go."""
        acks = None
        if len(self.acks[0]):
            t, off, val = (c.array() for c in self.acks)
            acks = Acks(t, off, val, self.reads.seen(val))
        self.reads = FirstReads()
        return acks

    def take_positions(self, lone: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Its positions (invoke times s, offsets); None: none. ``lone``
        (with ``ids``): ids of polls with no invoke, whose positions do not count."""
        if not self.positions[0]:
            return None
        t, off = (np.concatenate(x) for x in self.positions[:2])
        if self._ids and lone is not None and len(lone):
            keep = ~np.isin(np.concatenate(self.positions[2]), lone)
            t, off = t[keep], off[keep]
        self.positions = ([], [], [])
        return (t, off) if len(t) else None


def by_partition(part: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each partition's places in ``part``, in order: a mask a partition when
    they are few (as nearly always), else a stable sort."""
    lo, hi = int(part.min()), int(part.max())
    if hi - lo < 1 << 16:
        counts = np.bincount(part - lo)
        present = np.flatnonzero(counts)
        if len(present) <= 8:
            for k in present.tolist():
                yield lo + k, np.flatnonzero(part == lo + k) if len(present) > 1 else np.arange(len(part))
            return
    order = np.argsort(part, kind="stable")
    sp = part[order]
    starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]])
    for s, e in zip(starts.tolist(), np.r_[starts[1:], len(sp)].tolist()):
        yield int(sp[s]), order[s:e]


def index_plan(history: Path, index: Path) -> dict[int, list[int]] | None:
    """partition -> its row groups of the message index, in file order (its
    history order), when the digest may read its messages from the index: it
    is current (``index_is_current``), of one run (op ids are unique only
    within a run) and every message names a partition. None: read them from
    history.parquet."""
    if not index_is_current(history, index):
        return None
    meta = pq.read_metadata(index)
    run_col, part_col = INDEX_SCHEMA.get_field_index("run"), INDEX_SCHEMA.get_field_index("partition")
    plan: dict[int, list[int]] = {}
    runs = set()
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if rg.num_rows == 0:
            continue
        run, part = rg.column(run_col).statistics, rg.column(part_col).statistics
        if run is None or part is None or not (run.has_min_max and part.has_min_max) or part.min != part.max:
            return None
        runs.update((run.min, run.max))
        if part.min == NO_PARTITION or len(runs) > 1:
            return None
        plan.setdefault(int(part.min), []).append(g)
    return dict(sorted(plan.items()))


class Acked:
    """Op ids (invoke indexes) of ops with a message with an offset: a
    bitmap, grown as ids come past ``capacity`` (ids are history line
    numbers: fewer than twice the paired ops)."""

    def __init__(self, capacity: int = 0) -> None:
        self.bits = np.zeros(capacity, bool)      # (zeroed pages not written take no memory)

    def add(self, ids: np.ndarray) -> None:
        ids = ids[ids >= 0]
        if not len(ids):
            return
        top = int(ids.max())
        if top >= len(self.bits):
            self.bits = np.concatenate([self.bits, np.zeros(max(top + 1, 2 * len(self.bits)) - len(self.bits), bool)])
        self.bits[ids] = True

    def of(self, ids: np.ndarray) -> np.ndarray:
        """Whether each of ``ids`` is acked."""
        hit = (ids >= 0) & (ids < len(self.bits))
        hit[hit] = self.bits[ids[hit]]
        return hit


def index_partitions(index: Path, plan: dict[int, list[int]], acked: Acked) -> Iterator[tuple[int, Partition]]:
    """Each partition of ``plan`` (``index_plan``) with its messages added
    (positions with their op ids), read from the index a row group at a time
    (the next read while this one is added; a read of several comes as one
    array, a copy of them all); ``acked`` gets the ids of ops with a message
    with an offset (of a send or a txn: the digest's acknowledging writes)."""
    f = pq.ParquetFile(index)
    groups = [(p, g) for p, gs in plan.items() for g in gs]
    rows = {p: sum(f.metadata.row_group(g).num_rows for g in gs) for p, gs in plan.items()}   # bounds its acks
    part: Partition | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-report-index") as pool:
        ahead = pool.submit(f.read_row_group, groups[0][1], INDEX_COLUMNS) if groups else None
        for k, (p, _) in enumerate(groups):
            t = ahead.result()
            ahead = pool.submit(f.read_row_group, groups[k + 1][1], INDEX_COLUMNS) if k + 1 < len(groups) else None
            if part is None:
                part = Partition(rows[p], ids=True)
            _add_index_group(part, t, acked)
            del t
            if k + 1 == len(groups) or groups[k + 1][0] != p:
                yield p, part
                part = None


def _add_index_group(part: Partition, t: pa.Table, acked: Acked) -> None:
    """One row group: the writer puts an op's messages of a partition in one
    row group (``history.message_index.IndexWriter``), as ``Partition.add`` needs."""
    kind = numpy_of(t["kind"]).view(np.uint8)
    ids, off_col = numpy_of(t["id"]), t["offset"]
    has_off = bools(pc.is_valid(off_col)) if off_col.null_count else np.ones(t.num_rows, bool)
    acked.add(ids[_WRITE[kind] & has_off])
    part.add(_CODE[kind], has_off, ids, numpy_of(t["pos"]), numpy_of(t["t_inv"]), numpy_of(t["t_done"]),
             numpy_of(off_col), numpy_of(t["value"]))
