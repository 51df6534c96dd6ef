"""The history digest: what the plots and tables need, aggregated in columns over every op.

Built from paired-op tables (``history.paired.PARQUET_SCHEMA``): the run's
history.parquet a slice of row groups at a time, or its JSONL converted block
by block (``reports.history_source``). Every op is counted, however long the
history: per-op figures are kept only as numpy arrays (completion times,
latencies, acknowledged offsets, first reads), never as Python objects, so a
10M-op history digests in a few hundred MB. The plots thin points for
drawing only; the counts, bins and percentiles are of every op.

What counts as what follows the history contract (``history.ops``): client
ops are those of any process but the nemesis, the proxy and the sampler (the
proxy's events are listed with the nemesis ops); an op's
latency runs from its invoke to its completion; an acknowledged write is a
message of an ok send with its offset; a read is a message an ok poll (the
drain included) returned.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.fault_intervals import NemesisOp
from history.ops import COMPLETIONS, NEMESIS, OK, POLL, PROXY, SAMPLE, SAMPLER, SEND, TXN
from history.paired import CLIENT

from .columns import Seen, bools, code_of, codes, indices, numpy_of
from .op_tables import paired_tables

TYPES = COMPLETIONS                       # a completion's type is TYPES[code]
# the columns of history.parquet the digest reads for every row, and those it reads only for nemesis rows
COLUMNS = ("invoke_index", "index", "invoke_time", "time", "process", "role", "type", "f", "drain",
           "messages", "sample", "controller")
NEMESIS_COLUMNS = ("value", "error")
# reads the rows of NEMESIS_COLUMNS it is given (positions in the table just added)
ExtraColumns = Callable[[np.ndarray], pa.Table]


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


@dataclass
class Acks:
    """One partition's acknowledged sends (messages of ok sends), in history order."""
    t: np.ndarray          # ack time, s since the harness started
    offset: np.ndarray     # int64
    value: np.ndarray      # int64
    seen: np.ndarray       # the first time (s) a poll, drain included, returned the value; NaN: never

    def __len__(self) -> int:
        return len(self.t)


class AckTimes(Mapping):
    """(partition, value) -> the time (s) its send was acknowledged (the last
    such send's, for a value sent twice): a lookup into ``Digest.acks``."""

    def __init__(self, acks: dict[Any, Acks]):
        self._acks = acks
        self._sorted: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def _of(self, p: Any) -> tuple[np.ndarray, np.ndarray]:
        if p not in self._sorted:
            a = self._acks[p]
            order = np.argsort(a.value, kind="stable")
            v = a.value[order]
            last = np.r_[v[1:] != v[:-1], True] if len(v) else np.zeros(0, bool)
            self._sorted[p] = (v[last], a.t[order][last])
        return self._sorted[p]

    def __getitem__(self, key: Any) -> float:
        p, v = key
        p = as_partition(p)
        if p not in self._acks or isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise KeyError(key)
        vals, times = self._of(p)
        k = int(np.searchsorted(vals, v))
        if k == len(vals) or vals[k] != v:
            raise KeyError(key)
        return float(times[k])

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        for p in self._acks:
            for v in self._of(p)[0].tolist():
                yield p, v

    def __len__(self) -> int:
        return sum(len(self._of(p)[0]) for p in self._acks)


def _empty(dtype: Any) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass
class Digest:
    n_ops: int = 0                 # history lines: an invoke and a completion each count
    duration: float = 0.0          # s: the history's last time
    # the workload's start (s): the first client op's time (sampler and nemesis
    # ops may come a little before or after it); None when there is no client op
    start: float | None = None
    comp_t: np.ndarray = field(default_factory=lambda: _empty(float))     # client completions (s)
    comp_type: np.ndarray = field(default_factory=lambda: _empty(np.int8))  # TYPES[code]
    lat_t: np.ndarray = field(default_factory=lambda: _empty(float))      # completion time (s) ...
    lat_ms: np.ndarray = field(default_factory=lambda: _empty(np.float32))  # ... and latency of each
    lat_type: np.ndarray = field(default_factory=lambda: _empty(np.int8))   # client op with an invoke
    acks: dict[Any, Acks] = field(default_factory=dict)
    # non-drain ok polls: partition -> (invoke times s, offset of the poll's last record of it)
    positions: dict[Any, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)   # (time s, sample value)
    nemesis: list[NemesisOp] = field(default_factory=list)                      # in invocation order
    op_counts: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    processes: int = 0             # distinct client processes
    # write availability (reports.availability): client ops outside the drain, ns
    write_start: int | None = None          # the first invocation
    write_end: int | None = None            # the last completion
    write_acks: np.ndarray = field(default_factory=lambda: _empty(np.int64))  # completions that acknowledged a write

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

    @property
    def completions(self) -> int:
        return len(self.comp_t)

    @cached_property
    def ack_time(self) -> AckTimes:
        return AckTimes(self.acks)

    def sorted_partitions(self) -> list[Any]:
        """Partitions with acknowledged writes, in order."""
        return sorted(self.acks, key=lambda p: (not isinstance(p, int), str(p) if not isinstance(p, int) else p))


def _sample_value(sample: list[dict[str, Any]], controller: Any) -> dict[str, Any]:
    """A sample as the history records it (``history.ops``: "sample" values)."""
    return {"controller": controller,
            "partitions": {str(s["partition"]): {"leader": s["leader"], "isr": list(s["isr"] or []),
                                                  "epoch": s["epoch"]} for s in sample}}


class DigestBuilder:
    """Adds paired-op tables one after another (in history order) and
    finishes into a Digest; holds numpy arrays only."""

    def __init__(self) -> None:
        self.d = Digest()
        self._tmax: int | None = None
        self._start: int | None = None
        self._parts: dict[str, list[np.ndarray]] = defaultdict(list)
        self._procs = Seen()
        self._roles: set[Any] = set()

    def _keep(self, **arrays: np.ndarray) -> None:
        for k, a in arrays.items():
            self._parts[k].append(a)

    def add(self, t: pa.Table, extra: ExtraColumns | None = None) -> None:
        """``extra`` reads NEMESIS_COLUMNS of given rows when ``t`` lacks them."""
        n = t.num_rows
        if not n:
            return
        d = self.d
        role, rnames = codes(t["role"])
        nem, smp = role == code_of(rnames, NEMESIS), role == code_of(rnames, SAMPLER)
        # what the protocol proxy did to a request is a fault's event, listed with the nemesis ops
        nem |= role == code_of(rnames, PROXY)
        is_client = role == code_of(rnames, CLIENT)
        client = ~(nem | smp)
        done = bools(pc.is_valid(t["index"]))
        inv_index, index = numpy_of(t["invoke_index"]), numpy_of(t["index"], -1)
        invoked = ~done | (index != inv_index)
        it, ct = numpy_of(t["invoke_time"]), numpy_of(t["time"])
        ct = np.where(done, ct, it)
        d.n_ops += n + int((done & invoked).sum())
        tmax = int(max(it.max(), ct.max()))
        self._tmax = tmax if self._tmax is None else max(self._tmax, tmax)
        if client.any():
            first = int(it[client].min())
            self._start = first if self._start is None else min(self._start, first)
        tcode, tnames = codes(t["type"])
        tcode = np.array([TYPES.index(x) if x in TYPES else -1 for x in tnames] + [-1], np.int8)[tcode]
        fcode, fnames = codes(t["f"])
        # completions, op counts, latencies of client ops
        comp = client & done
        self._keep(comp_t=ct[comp], comp_type=tcode[comp], comp_invoked=invoked[comp],
                   comp_lat=(ct - it)[comp])
        counts = np.bincount((fcode[comp] + 1) * 4 + tcode[comp] + 1, minlength=4 * (len(fnames) + 1))
        for k in np.flatnonzero(counts).tolist():
            f, ty = divmod(k, 4)
            if ty:
                d.op_counts[str(fnames[f - 1]) if f else "None"][TYPES[ty - 1]] += int(counts[k])
        self._procs.add(numpy_of(t["process"])[is_client])
        if (client & ~is_client).any():
            self._roles.update(rnames[c] for c in np.unique(role[client & ~is_client]).tolist())
        by_f = {x: fcode == code_of(fnames, x) for x in (SEND, POLL, TXN)}
        self._messages(t, {x: m & is_client & done for x, m in by_f.items()}, is_client & ~bools(t["drain"]),
                       done, invoked, it, ct, tcode)
        if smp.any():
            self._samples(t, smp & done & (fcode == code_of(fnames, SAMPLE)), ct)
        if nem.any():
            self._nemesis(t, np.flatnonzero(nem), extra, inv_index, it, ct, done)

    def _messages(self, t: pa.Table, op: dict[str, np.ndarray], live: np.ndarray, done: np.ndarray,
                  invoked: np.ndarray, it: np.ndarray, ct: np.ndarray, tcode: np.ndarray) -> None:
        """Acknowledged writes, reads and poll positions from the messages
        column (flattened whole: nearly every op is a send or a poll)."""
        d = self.d
        # write availability: the workload's time outside the drain and the completions that acknowledged
        if (live & invoked).any():
            lo = int(it[live & invoked].min())
            d.write_start = lo if d.write_start is None else min(d.write_start, lo)
        if (live & done).any():
            hi = int(ct[live & done].max())
            d.write_end = hi if d.write_end is None else max(d.write_end, hi)
        ok = tcode == TYPES.index(OK)
        writes = (op[SEND] & (tcode >= 0) & (tcode != TYPES.index("fail"))) | (op[TXN] & ok)
        polls = op[POLL] & ok
        code = np.zeros(t.num_rows, np.int8)      # per op: 1 ok send, 2 a poll's positions count, 3 other ok poll
        code[op[SEND] & ok] = 1
        code[polls] = 3
        code[polls & live & invoked] = 2
        lists = t["messages"].combine_chunks() if isinstance(t["messages"], pa.ChunkedArray) else t["messages"]
        flat = lists.flatten()
        if not len(flat):
            return
        offsets = numpy_of(lists.offsets)            # (pc.list_parent_indices takes 40x as long)
        parent = np.repeat(np.arange(t.num_rows), np.diff(offsets))
        mcode = code[parent]
        offs = flat.field("offset")
        has_off = bools(pc.is_valid(offs)) if offs.null_count else np.ones(len(flat), bool)
        part, off, val = numpy_of(flat.field("partition")), numpy_of(offs), numpy_of(flat.field("value"))
        acked = np.zeros(t.num_rows, bool)
        acked[parent[has_off & writes[parent]]] = True
        self._keep(write_acks=ct[writes & live & acked])
        a = (mcode == 1) & has_off
        self._keep(ack_p=part[a], ack_t=ct[parent[a]], ack_off=off[a], ack_val=val[a])
        r = mcode >= 2
        self._keep(read_p=part[r], read_t=ct[parent[r]], read_val=val[r])
        # a non-drain poll's last record of each partition it read (its records come per partition)
        pos = mcode == 2
        pp, pr, po = part[pos], parent[pos], off[pos]
        last = np.r_[(pp[1:] != pp[:-1]) | (pr[1:] != pr[:-1]), True] if len(pp) else np.zeros(0, bool)
        self._keep(pos_p=pp[last], pos_t=it[pr[last]], pos_off=po[last])

    def _samples(self, t: pa.Table, rows: np.ndarray, ct: np.ndarray) -> None:
        rows = np.flatnonzero(rows)
        taken = t.select(["sample", "controller"]).take(indices(rows))
        for r, sample, controller in zip(rows.tolist(), taken["sample"].to_pylist(), taken["controller"].to_pylist()):
            if sample is not None:
                self.d.samples.append((ct[r] / 1e9, _sample_value(sample, controller)))

    def _nemesis(self, t: pa.Table, rows: np.ndarray, extra: ExtraColumns | None, inv_index: np.ndarray,
                 it: np.ndarray, ct: np.ndarray, done: np.ndarray) -> None:
        cols = t.select(list(NEMESIS_COLUMNS)).take(indices(rows)) if extra is None else extra(rows)
        fs = t["f"].take(indices(rows)).to_pylist()
        for k, r in enumerate(rows.tolist()):
            value = cols["value"][k].as_py()
            self.d.nemesis.append(NemesisOp(index=int(inv_index[r]), invoke_time=int(it[r]),
                                            time=int(ct[r]) if done[r] else None, f=str(fs[k]),
                                            value=None if value is None else json.loads(value),
                                            error=cols["error"][k].as_py() if done[r] else None))

    def _cat(self, name: str, dtype: Any) -> np.ndarray:
        parts = self._parts.pop(name, [])
        return np.concatenate(parts).astype(dtype, copy=False) if parts else _empty(dtype)

    def finish(self) -> Digest:
        d = self.d
        d.duration = 0.0 if self._tmax is None else max(0.0, self._tmax / 1e9)
        d.start = None if self._start is None else self._start / 1e9
        comp_t, invoked = self._cat("comp_t", np.int64), self._cat("comp_invoked", bool)
        d.comp_t, d.comp_type = comp_t / 1e9, self._cat("comp_type", np.int8)
        d.lat_t, d.lat_type = d.comp_t[invoked], d.comp_type[invoked]
        d.lat_ms = (np.maximum(self._cat("comp_lat", np.int64)[invoked], 0) / 1e6).astype(np.float32)
        d.write_acks = self._cat("write_acks", np.int64)
        d.processes = len(self._procs) + len(self._roles)
        d.nemesis.sort(key=lambda ev: ev.index if ev.index is not None else -1)
        first_read = _first_reads(self._cat("read_p", np.int64), self._cat("read_val", np.int64),
                                  self._cat("read_t", np.int64))
        ack = [self._cat(k, np.int64) for k in ("ack_p", "ack_t", "ack_off", "ack_val")]
        for p, (t, off, val) in _by_partition(ack[0], ack[1:]):
            uv, ut = first_read.get(p, (_empty(np.int64), _empty(np.int64)))
            seen = np.full(len(val), np.nan)
            if len(uv):
                k = np.minimum(np.searchsorted(uv, val), len(uv) - 1)
                hit = uv[k] == val
                seen[hit] = ut[k[hit]] / 1e9
            d.acks[p] = Acks(t / 1e9, off, val, seen)
        pos = [self._cat(k, np.int64) for k in ("pos_p", "pos_t", "pos_off")]
        d.positions = {p: (t / 1e9, off) for p, (t, off) in _by_partition(pos[0], pos[1:])}
        return d


def _by_partition(part: np.ndarray, cols: list[np.ndarray]) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Each partition's rows of ``cols``, in their order (a radix sort when
    the partitions fit 16 bits, as they nearly always do)."""
    if not len(part):
        return
    lo, hi = int(part.min()), int(part.max())
    key = (part - lo).astype(np.int16) if hi - lo < 2**15 else part
    order = np.argsort(key, kind="stable")
    sp = part[order]
    starts = np.flatnonzero(np.r_[True, sp[1:] != sp[:-1]])
    for s, e in zip(starts, np.r_[starts[1:], len(sp)]):
        idx = order[s:e]
        yield int(sp[s]), [c[idx] for c in cols]


def _first_reads(part: np.ndarray, val: np.ndarray, t: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """partition -> (distinct values read, sorted; the first time each was read)."""
    out = {}
    for p, (v, tt) in _by_partition(part, [val, t]):
        order = np.argsort(v, kind="stable")
        v, tt = v[order], tt[order]
        starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
        out[p] = (v[starts], np.minimum.reduceat(tt, starts))
    return out


def digest_tables(tables: Iterable[pa.Table | tuple[pa.Table, ExtraColumns | None]]) -> Digest:
    """The digest of paired-op tables (each optionally with its NEMESIS_COLUMNS reader)."""
    b = DigestBuilder()
    for item in tables:
        t, extra = item if isinstance(item, tuple) else (item, None)
        b.add(t, extra)
    return b.finish()


def digest(ops: Iterable[dict[str, Any]]) -> Digest:
    """The digest of history ops (dicts as ``history.ops`` reads them): paired,
    then as from a file. Ops the contract cannot read are left out."""
    return digest_tables(paired_tables(ops, []))
