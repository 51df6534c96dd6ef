"""The message columns of client sends and polls, built column by column from
their value texts: the bulk of the columnar conversion (``history.convert``).

Nearly every op of a history is a send or a poll, so these two are built in
columns (their value texts, read again by pyarrow's JSON reader) rather than
op by op. Each returns ``messages``, ``partitions`` and ``partition_starts``
as the per-op definition (``history.paired``) has them, row for row; a value
of another shape raises ``Unsupported`` (the caller then pairs op by op).
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.jsonl_blocks import Unsupported, read_json, text_offsets, to_numpy
from history.paired import MESSAGE_TYPE

MessageColumns = tuple[pa.Array, pa.Array, pa.Array]     # messages, partitions, partition_starts


def _joined(texts: pa.Array) -> pa.Buffer:
    """'{"v":<text>}' per line, as one buffer for the JSON reader."""
    big = pa.large_string()
    wrapped = pc.binary_join_element_wise(pa.scalar('{"v":', big), pc.cast(texts, big), pa.scalar("}\n", big),
                                          pa.scalar("", big))
    if isinstance(wrapped, pa.ChunkedArray):
        wrapped = wrapped.combine_chunks()
    if wrapped.type != pa.large_string():
        wrapped = pc.cast(wrapped, pa.large_string())
    offsets = text_offsets(wrapped)
    return wrapped.buffers()[2][int(offsets[0]):int(offsets[-1])]


def list_column(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """Row i is ``values[offsets[i]:offsets[i + 1]]``."""
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), pa.int32()), values)


def _message_column(part: np.ndarray, off: pa.Array, val: np.ndarray, row_offsets: np.ndarray) -> pa.Array:
    """The ``messages`` column: (partition, offset, value) structs, listed by row."""
    inner = pa.StructArray.from_arrays([pa.array(part, pa.int32()), off, pa.array(val, pa.int64())],
                                       fields=list(MESSAGE_TYPE))
    return list_column(row_offsets, inner)


def _offsets_of(counts: np.ndarray) -> np.ndarray:
    """The list offsets of rows of ``counts`` entries each."""
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def send_columns(texts: pa.Array) -> MessageColumns:
    """messages, partitions, partition_starts of send values ``[[p, v, o], ...]``."""
    v = read_json(_joined(texts), pa.schema([("v", pa.list_(pa.list_(pa.int64())))]), "error")["v"]
    v = v.combine_chunks()
    if v.null_count:
        raise Unsupported("null send value")
    inner = v.flatten()
    if inner.null_count:
        raise Unsupported("null send message")
    lens = to_numpy(pc.list_value_length(inner))
    if len(lens) and lens.min() < 2:
        raise Unsupported("short send message")
    p = pc.list_element(inner, 0)
    val = pc.list_element(inner, 1)
    if p.null_count or val.null_count:
        raise Unsupported("null partition or value")
    o_vals = np.zeros(len(lens), np.int64)
    o_null = np.ones(len(lens), bool)
    long = lens > 2
    if long.any():
        third = pc.list_element(inner.filter(pa.array(long)), 2)
        o_vals[long] = to_numpy(third, 0)
        o_null[long] = to_numpy(pc.is_null(third))
    o = pa.array(o_vals, pa.int64(), mask=o_null)
    part = to_numpy(p)
    if len(part) and (part.min() < -2**31 or part.max() >= 2**31):
        raise Unsupported("partition out of range")
    row_off = np.asarray(v.offsets.to_numpy(), np.int64) - int(v.offsets[0].as_py())
    n_rows = len(v)
    row_of = np.repeat(np.arange(n_rows), np.diff(row_off))
    # partitions in order of first appearance; starts when each partition is one run
    new_run = np.ones(len(part), bool)
    if len(part):
        new_run[1:] = (part[1:] != part[:-1]) | (row_of[1:] != row_of[:-1])
    runs = np.bincount(row_of[new_run], minlength=n_rows) if len(part) else np.zeros(n_rows, np.int64)
    # a row of one run names one partition; only rows of several runs are counted (nearly every
    # send is one message: its row needs no sort)
    several = runs[row_of] > 1 if len(part) else np.zeros(0, bool)
    pairs = np.unique(np.stack([row_of[several], part[several]]), axis=1)
    distinct = np.where(runs > 1, np.bincount(pairs[0], minlength=n_rows), runs)
    run_idx = np.flatnonzero(new_run)
    parts_vals = part[run_idx]
    starts_vals = run_idx - row_off[row_of[run_idx]] if len(run_idx) else run_idx
    odd = np.flatnonzero(runs != distinct)
    messages = _message_column(part, o, to_numpy(val), row_off)
    if not len(odd):
        off = _offsets_of(runs)
        return (messages, list_column(off, pa.array(parts_vals, pa.int32())),
                list_column(off, pa.array(starts_vals, pa.int32())))
    # rare: a partition in two runs (no starts); fill those rows one by one
    parts_py, starts_py = [], []
    run_off = _offsets_of(runs)
    odd_set = set(odd.tolist())
    for r in range(n_rows):
        if r in odd_set:
            ps = part[row_off[r]:row_off[r + 1]].tolist()
            parts_py.append(list(dict.fromkeys(ps)))
            starts_py.append(None)
        else:
            parts_py.append(parts_vals[run_off[r]:run_off[r + 1]].tolist())
            starts_py.append(starts_vals[run_off[r]:run_off[r + 1]].tolist())
    return messages, pa.array(parts_py, pa.list_(pa.int32())), pa.array(starts_py, pa.list_(pa.int32()))


def poll_columns(texts: pa.Array) -> MessageColumns:
    """messages, partitions, partition_starts of ok poll values ``{"<p>": [[o, v], ...]}``
    (or null), keeping each value's key order."""
    n_rows = len(texts)
    joined = _joined(texts)
    keys = sorted(set(re.findall(rb'"([^"]*)":', joined.to_pybytes())) - {b"v"})
    ints_keys = []
    for k in keys:
        s = k.decode()
        if not re.fullmatch(r"-?\d+", s) or str(int(s)) != s or not -2**31 <= int(s) < 2**31:
            raise Unsupported(f"poll key {s!r}")
        ints_keys.append(int(s))
    if len(set(ints_keys)) != len(ints_keys):
        raise Unsupported("duplicate poll key")
    fields = [(k.decode(), pa.list_(pa.list_(pa.int64()))) for k in keys]
    v = read_json(joined, pa.schema([("v", pa.struct(fields))]), "error")["v"].combine_chunks() \
        if n_rows else pa.array([], pa.struct(fields))
    # Per key, its entries (the rows whose value has it, with the key's position in the text)
    # and its messages, flattened in row order; then every entry in (row, position) order and
    # its messages gathered by numpy (taking the nested lists themselves cost as much again
    # as reading them: docs/benchmarks.md, "The final drain's lines").
    rows, poss, kidx, lens, starts_in, offs, vals = [], [], [], [], [], [], []
    base = 0
    for j, k in enumerate(keys):
        pos = to_numpy(pc.find_substring(texts, f'"{k.decode()}":'))
        r = np.flatnonzero(pos >= 0)
        if not len(r):
            continue
        field = v.field(j)
        n_of = to_numpy(pc.list_value_length(field), 0)
        if int(n_of.sum()) != int(n_of[r].sum()):
            raise Unsupported(f"poll key {k.decode()!r} read where the text has none")
        pairs = field.flatten()
        if pairs.null_count:
            raise Unsupported("null poll read")
        plen = to_numpy(pc.list_value_length(pairs))
        if len(plen) and (plen.min() != 2 or plen.max() != 2):
            raise Unsupported("poll read is not [offset, value]")
        ints = pairs.flatten()
        if ints.null_count:
            raise Unsupported("null offset or value")
        ints = to_numpy(ints)
        rows.append(r)
        poss.append(pos[r])
        kidx.append(np.full(len(r), ints_keys[j], np.int64))
        lens.append(n_of[r])
        starts_in.append(base + np.concatenate([[0], np.cumsum(n_of[r])[:-1]]).astype(np.int64))
        offs.append(ints[0::2])
        vals.append(ints[1::2])
        base += len(plen)
    if not rows:
        empty = _offsets_of(np.zeros(n_rows, np.int64))
        return (_message_column(np.zeros(0, np.int32), pa.array([], pa.int64()), np.zeros(0, np.int64), empty),
                list_column(empty, pa.array([], pa.int32())), list_column(empty, pa.array([], pa.int32())))
    row_e, pos_e, key_e = np.concatenate(rows), np.concatenate(poss), np.concatenate(kidx)
    order = np.lexsort((pos_e, row_e))
    row_e, key_e = row_e[order], key_e[order]
    elen = np.concatenate(lens)[order]
    first = np.concatenate(starts_in)[order]
    cum_e = np.concatenate([[0], np.cumsum(elen)]).astype(np.int64)
    gather = np.repeat(first - cum_e[:-1], elen) + np.arange(int(cum_e[-1]), dtype=np.int64)
    o = pa.array(np.concatenate(offs)[gather], pa.int64())
    val = np.concatenate(vals)[gather]
    part = np.repeat(key_e, elen)
    msg_rows = np.repeat(row_e, elen)
    row_off = _offsets_of(np.bincount(msg_rows, minlength=n_rows))
    ent_off = _offsets_of(np.bincount(row_e, minlength=n_rows))
    cum = np.concatenate([[0], np.cumsum(elen)])[:-1]
    starts = cum - row_off[row_e]
    return (_message_column(part, o, val, row_off), list_column(ent_off, pa.array(key_e, pa.int32())),
            list_column(ent_off, pa.array(starts, pa.int32())))

