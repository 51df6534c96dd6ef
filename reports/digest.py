"""The history digest: what the plots and tables need, aggregated in columns over every op.

Built from paired-op tables (``history.paired.PARQUET_SCHEMA``): the run's
history.parquet a slice of row groups at a time (its messages from the message
index beside it when that is current: ``reports.digest_messages``), or its
JSONL converted block by block (``reports.history_source``). Every op is
counted, however long the history: per-op figures are kept only as numpy
arrays (completion times, latencies, acknowledged offsets, first reads),
never as Python objects, so a 10M-op history digests in a few hundred MB. The plots thin points for
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
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.arrays import _array
from history.fault_intervals import NemesisOp
from history.ops import COMPLETIONS, NEMESIS, OK, POLL, PROXY, SAMPLE, SAMPLER, SEND, TXN
from history.paired import CLIENT

from .columns import Column, Seen, bools, code_of, codes, indices, numpy_of
from .digest_messages import ACK, POSITION_READ, READ, Acked, Acks, Partition, by_partition, index_partitions
from .op_tables import paired_tables

TYPES = COMPLETIONS                       # a completion's type is TYPES[code]
# the columns of history.parquet the digest reads for every row ("messages" only when it does not read the
# message index), and those it reads only for the rows of nemesis ops and of samples (few)
COLUMNS = ("invoke_index", "index", "invoke_time", "time", "process", "role", "type", "f", "drain", "messages")
NEMESIS_COLUMNS = ("value", "error")
SAMPLE_COLUMNS = ("sample", "controller")
MESSAGE_CHUNK = 1 << 22      # messages of the messages column flattened at a time (whole ops)
# reads the given columns (of NEMESIS_COLUMNS, SAMPLE_COLUMNS) of the given rows (positions in the table just added)
ExtraColumns = Callable[[np.ndarray, Sequence[str]], pa.Table]


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
    finishes into a Digest; holds numpy arrays only. The per-op figures are
    appended in place (``columns.Column``), never held twice as pieces and
    their concatenation; ``rows``, a bound on the rows to come when known,
    sizes them from the start.

    With ``index`` and its ``plan`` (``digest_messages.index_plan``) the
    messages are read from the message index (a partition at a time, at the
    first ``add``) and the tables' messages column is not read: flattening
    it was most of the digest's time and memory on a long history."""

    def __init__(self, index: Path | None = None, plan: dict[int, list[int]] | None = None, rows: int = 0) -> None:
        self.d = Digest()
        self._rows = rows
        self._tmax: int | None = None
        self._start: int | None = None
        self._cols = {name: Column(dtype, rows) for name, dtype in (
            ("comp_t", float), ("comp_type", np.int8), ("lat_t", float), ("lat_type", np.int8),
            ("lat_ms", np.float32), ("write_acks", np.int64))}
        self._lone: list[np.ndarray] = []      # with the index: ids of non-drain ok polls with no invoke
        self._procs = Seen()
        self._roles: set[Any] = set()
        self._index = (index, plan) if index is not None and plan is not None else None
        self._acked: Acked | None = None       # with the index: ops with a message with an offset
        self._parts: dict[int, Partition] = {}          # partition -> its messages so far
        self._acks: dict[int, Acks | None] = {}         # partition -> its Acks, read from the index

    def _keep(self, **arrays: np.ndarray) -> None:
        for k, a in arrays.items():
            self._cols[k].append(a)

    def add(self, t: pa.Table, extra: ExtraColumns | None = None) -> None:
        """``extra`` reads NEMESIS_COLUMNS and SAMPLE_COLUMNS of given rows when ``t`` lacks them."""
        n = t.num_rows
        if not n:
            return
        if self._index is not None and self._acked is None:
            self._read_index(*self._index)
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
        # completions, op counts, latencies of client ops (in seconds and ms as the Digest has them, a
        # slice at a time: the same numbers as converting the whole, without a second copy of it)
        comp = client & done
        comp_t, comp_type, lat = ct[comp] / 1e9, tcode[comp], invoked[comp]
        self._keep(comp_t=comp_t, comp_type=comp_type, lat_t=comp_t[lat], lat_type=comp_type[lat],
                   lat_ms=(np.maximum((ct - it)[comp][lat], 0) / 1e6).astype(np.float32))
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
                       done, invoked, inv_index, it, ct, tcode)
        if smp.any():
            self._samples(t, smp & done & (fcode == code_of(fnames, SAMPLE)), extra, ct)
        if nem.any():
            self._nemesis(t, np.flatnonzero(nem), extra, inv_index, it, ct, done)

    def _messages(self, t: pa.Table, op: dict[str, np.ndarray], live: np.ndarray, done: np.ndarray,
                  invoked: np.ndarray, inv_index: np.ndarray, it: np.ndarray, ct: np.ndarray,
                  tcode: np.ndarray) -> None:
        """Acknowledged writes, reads and poll positions from the messages
        column (flattened whole: nearly every op is a send or a poll), each
        partition's handed to its ``Partition``; with the message index (read
        already), only which writes acknowledged and which polls had no invoke."""
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
        if self._acked is not None:
            # the index told which writes acknowledged; non-drain polls with no invoke have no position
            w, lone = writes & live, polls & live & ~invoked
            self._keep(write_acks=ct[w][self._acked.of(inv_index[w])])
            if lone.any():
                self._lone.append(inv_index[lone])
            return
        code = np.zeros(t.num_rows, np.int8)
        code[op[SEND] & ok] = ACK
        code[polls] = READ
        code[polls & live & invoked] = POSITION_READ
        lists = _array(t["messages"])
        offsets = numpy_of(lists.offsets)
        offsets = offsets - offsets[0]               # places in the flattened column
        total = int(offsets[-1])
        if not total:
            return
        flat = lists.flatten()
        acked = np.zeros(t.num_rows, bool)
        # whole ops of about MESSAGE_CHUNK messages at a time: a drain's polls return whole logs
        starts = np.searchsorted(offsets, np.arange(MESSAGE_CHUNK, total, MESSAGE_CHUNK), side="right") - 1
        bounds = np.unique(np.r_[0, starts, t.num_rows]).tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            m0, m1 = int(offsets[a]), int(offsets[b])
            if m1 > m0:
                # (pc.list_parent_indices takes 40x as long)
                parent = np.repeat(np.arange(a, b), np.diff(offsets[a:b + 1]))
                self._flat(flat.slice(m0, m1 - m0), parent, code, writes, acked, it, ct)
        self._keep(write_acks=ct[writes & live & acked])

    def _flat(self, flat: pa.StructArray, parent: np.ndarray, code: np.ndarray, writes: np.ndarray,
              acked: np.ndarray, it: np.ndarray, ct: np.ndarray) -> None:
        """Messages of whole ops (``parent``: the op of each), each
        partition's handed to its Partition; ``acked`` marks the writes with
        an offset."""
        offs = flat.field("offset")
        has_off = bools(pc.is_valid(offs)) if offs.null_count else np.ones(len(flat), bool)
        acked[parent[has_off & writes[parent]]] = True
        keep = np.flatnonzero(code[parent] != 0)      # the messages of ok sends and ok polls
        if not len(keep):
            return
        parent, has_off = parent[keep], has_off[keep]
        off, val = numpy_of(offs)[keep], numpy_of(flat.field("value"))[keep]
        for p, at in by_partition(numpy_of(flat.field("partition"))[keep]):
            pr = parent[at]
            # ``keep[at]`` (a message's place among these) tells runs of a poll's list apart
            self._partition(p).add(code[pr], has_off[at], pr, keep[at], it[pr], ct[pr], off[at], val[at])

    def _partition(self, p: int) -> Partition:
        if p not in self._parts:
            self._parts[p] = Partition()
        return self._parts[p]

    def _samples(self, t: pa.Table, rows: np.ndarray, extra: ExtraColumns | None, ct: np.ndarray) -> None:
        rows = np.flatnonzero(rows)
        if not len(rows):
            return
        taken = _rows(t, rows, SAMPLE_COLUMNS, extra)
        for r, sample, controller in zip(rows.tolist(), taken["sample"].to_pylist(), taken["controller"].to_pylist()):
            if sample is not None:
                self.d.samples.append((ct[r] / 1e9, _sample_value(sample, controller)))

    def _nemesis(self, t: pa.Table, rows: np.ndarray, extra: ExtraColumns | None, inv_index: np.ndarray,
                 it: np.ndarray, ct: np.ndarray, done: np.ndarray) -> None:
        cols = _rows(t, rows, NEMESIS_COLUMNS, extra)
        fs = t["f"].take(indices(rows)).to_pylist()
        for k, r in enumerate(rows.tolist()):
            value = cols["value"][k].as_py()
            self.d.nemesis.append(NemesisOp(index=int(inv_index[r]), invoke_time=int(it[r]),
                                            time=int(ct[r]) if done[r] else None, f=str(fs[k]),
                                            value=None if value is None else json.loads(value),
                                            error=cols["error"][k].as_py() if done[r] else None))

    def _read_index(self, index: Path, plan: dict[int, list[int]]) -> None:
        """The messages from the message index, a partition at a time (its
        reads let go once its Acks are made); which ops acknowledged writes."""
        self._acked = Acked(2 * self._rows)
        for p, part in index_partitions(index, plan, self._acked):
            self._acks[p] = part.take_acks()
            self._parts[p] = part

    def finish(self) -> Digest:
        d = self.d
        if self._index is not None and self._acked is None:
            self._read_index(*self._index)
        d.duration = 0.0 if self._tmax is None else max(0.0, self._tmax / 1e9)
        d.start = None if self._start is None else self._start / 1e9
        cols = {k: c.array() for k, c in self._cols.items()}
        d.comp_t, d.comp_type, d.lat_t, d.lat_type = cols["comp_t"], cols["comp_type"], cols["lat_t"], cols["lat_type"]
        d.lat_ms, d.write_acks = cols["lat_ms"], cols["write_acks"]
        d.processes = len(self._procs) + len(self._roles)
        d.nemesis.sort(key=lambda ev: ev.index if ev.index is not None else -1)
        lone = np.unique(np.concatenate(self._lone)) if self._lone else None
        for p in sorted(self._parts):
            part = self._parts.pop(p)
            acks = self._acks.pop(p) if p in self._acks else part.take_acks()
            pos = part.take_positions(lone)
            if acks is not None:
                d.acks[p] = acks
            if pos is not None:
                d.positions[p] = pos
        return d


def _rows(t: pa.Table, rows: np.ndarray, names: Sequence[str], extra: ExtraColumns | None) -> pa.Table:
    """``names`` of ``rows`` of ``t``, or read by ``extra`` when ``t`` lacks them."""
    if extra is None or all(n in t.column_names for n in names):
        return t.select(list(names)).take(indices(rows))
    return extra(rows, names)


def digest_tables(tables: Iterable[pa.Table | tuple[pa.Table, ExtraColumns | None]]) -> Digest:
    """The digest of paired-op tables (each optionally with its reader of NEMESIS_COLUMNS and SAMPLE_COLUMNS)."""
    b = DigestBuilder()
    for item in tables:
        t, extra = item if isinstance(item, tuple) else (item, None)
        b.add(t, extra)
    return b.finish()


def digest(ops: Iterable[dict[str, Any]]) -> Digest:
    """The digest of history ops (dicts as ``history.ops`` reads them): paired,
    then as from a file. Ops the contract cannot read are left out."""
    return digest_tables(paired_tables(ops, []))
